"""What of the base commit's tree the trials may see: found once, by ``skilltrial lock``.

Every trial starts from the whole repository at the base commit. In the flow the README recommends
(``skilltrial init skills/my-skill`` in the skill's own repository, ``repo: ..``) that tree holds the skill
under test, the tasks with their ``verify_cmd`` and ``pass_criteria`` and the preregistration: the
baseline arm would have the skill after all, and every agent could read how it is graded. So the lock
surveys the tree (:func:`survey`) and leaves out, by default:

- the experiment's own files: the preregistration, its lock, the tasks, the skills ledger, the shelf of
  rejected skills, a library's folder and its ``baseline_from``, and any experiment directory (a folder
  holding ``experiment.json`` and ``results.jsonl``);
- every folder holding the skill under test (each skill of a library): the skill's own folder, and any
  folder whose ``SKILL.md`` has the same front-matter ``name`` (the name Claude Code lists it under), or
  the same content.

``execution.include_paths`` keeps a path in, by the name the lock gives it (or a folder above it). The
result is recorded in the lock (``base_excluded``, hashed), and one function makes every tree a trial
stands on without those paths (:func:`harness.host.gitops.checkout_base`). What else both arms will see
that can change an agent's behaviour (``CLAUDE.md``, ``AGENTS.md``, ``.claude/``, other skills, what
``include_paths`` kept in) is listed as ``base_visible``: a warning at lock and a note in the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.errors import ConfigError
from harness.host import gitops
from harness.records import RESULTS
from harness.study import versions
from harness.study.config import Study, baseline_dir, library_skills, lock_path
from harness.study.skillname import front_matter_name

SKILL_FILE = "SKILL.md"
INSTRUCTION_FILES = ("CLAUDE.md", "CLAUDE.local.md", "AGENTS.md")
"""Files an agent takes as instructions (the CLI loads CLAUDE.md itself outside ``--bare``)."""
LEDGER = "skills-ledger.yaml"
EXPERIMENT_MARKER = "experiment.json"
MAX_SKILL_MD = 1 << 20


@dataclass(frozen=True)
class BaseTreeSurvey:
    """What the lock records about the base tree (see the module docstring)."""

    excluded: dict[str, str] = field(default_factory=dict)
    """Path from the repository's top -> why it is left out of every trial's tree."""
    visible: dict[str, str] = field(default_factory=dict)
    """Path -> what it is: seen by both arms, and able to change what an agent does."""


def listed_as(skill_md: bytes, folder: str) -> str:
    """The name Claude Code lists a skill under: its SKILL.md's front-matter ``name``, else its folder's name."""
    return front_matter_name(skill_md.decode("utf-8", "replace")) or PurePosixPath(folder).name


def _folder_of(path: str) -> str:
    """The folder holding ``path`` ("" for the repository's top)."""
    return path.rpartition("/")[0]


def _folders(entries: Iterable[str]) -> set[str]:
    """Every folder above an entry (plain string work: a tree of 500,000 files takes a second)."""
    out: set[str] = set()
    for path in entries:
        parent = path.rpartition("/")[0]
        while parent and parent not in out:
            out.add(parent)
            parent = parent.rpartition("/")[0]
    return out


def _under(path: str, folder: str) -> bool:
    return folder == "" or path == folder or path.startswith(folder + "/")


def survey(study: Study, base_sha: str) -> BaseTreeSurvey:
    """What of ``base_sha``'s tree no trial sees, and what both arms see that can change behaviour.

    Raises :class:`ConfigError` naming ``execution.include_paths[i]`` for a kept-in path that names nothing
    the lock leaves out, and ``execution.repo`` when the repository's top is itself the skill under test."""
    top = gitops.repo_top(study.repo_path).resolve()
    entries = [path for mode, path in gitops.tree_entries(top, base_sha) if mode != "160000"]
    files = set(entries)
    folders = _folders(entries)

    def in_tree(path: Path) -> str | None:
        try:
            rel = path.resolve().relative_to(top).as_posix()
        except ValueError:
            return None
        return rel if rel in files or rel in folders else None

    found: dict[str, str] = {}
    for own, what in _own_paths(study):
        rel = in_tree(own)
        if rel is not None and rel != ".":
            found.setdefault(rel, what)
    for path in entries:
        parent, _, name = path.rpartition("/")
        if name == RESULTS and parent and f"{parent}/{EXPERIMENT_MARKER}" in files:
            found.setdefault(parent, "an experiment directory: results and transcripts of a run")
    skill_md = sorted(p for p in entries if p.rpartition("/")[2] == SKILL_FILE)
    blobs = gitops.read_blobs(top, base_sha, skill_md, MAX_SKILL_MD)
    names, contents = _skills_under_test(study)
    for path in skill_md:
        folder = _folder_of(path)
        content = blobs.get(path)
        if content is None:
            continue
        why: str | None = None
        if content in contents:
            why = "a copy of the skill under test: the same SKILL.md"
        elif (name := listed_as(content, folder or top.name)) in names:
            why = f"a copy of the skill under test: SKILL.md name {name!r}"
        if why is not None:
            found.setdefault(folder, why)
    if "" in found:
        raise ConfigError(
            study.prereg_path,
            f"the repository's top ({top}) is itself the skill under test ({found['']}): every trial would see it",
            field="execution.repo",
            hint="point execution.repo at the repository the tasks are about",
        )
    excluded = {p: why for p, why in found.items() if not any(_under(p, q) and p != q for q in found)}
    excluded, kept = _keep_included(study, excluded)
    return BaseTreeSurvey(dict(sorted(excluded.items())), _visible(entries, skill_md, blobs, excluded, kept))


def _own_paths(study: Study) -> list[tuple[Path, str]]:
    """The experiment's own files and folders, wherever they are (those inside the tree are left out)."""
    prereg = study.prereg
    own = [
        (study.prereg_path, "the preregistration"),
        (lock_path(study.prereg_path), "the preregistration's lock"),
        (study.tasks_path, "the tasks, with verify_cmd and pass_criteria"),
        (study.root / LEDGER, "the skills ledger"),
        (study.shelf_dir, "the shelf of rejected skills"),
    ]
    if prereg.library is not None:
        own.append((study.skill_dir, "the library under test"))
        if prereg.library.baseline_from is not None:
            own.append((baseline_dir(study), "the library's reused baseline, library.baseline_from"))
    elif prereg.selection is not None:
        own.append((study.skill_dir, "the library the selected set comes from"))
    elif prereg.arms is not None:
        # the folder each version names in the repository (a version at a git ref: where that ref has it)
        own += [((study.root / v.path).resolve(), f"version {n} of the skill under test")
                for n, v in prereg.arms.versions.items()]  # fmt: skip
    else:
        own.append((study.skill_dir, "the skill under test"))
    return own


def _skills_under_test(study: Study) -> tuple[set[str], set[bytes]]:
    """The names the skill(s) under test are listed under (and the preregistration's ``skill``), and
    their SKILL.md contents."""
    if study.prereg.library is not None or study.prereg.selection is not None:
        folders = [study.skill_dir / name for name in library_skills(study)]
    elif study.prereg.arms is not None:  # every version: neither arm may find the other's in its tree
        return _versions_under_test(study)
    else:
        folders = [study.skill_dir]
    names = {study.prereg.skill} if study.prereg.library is None else set()
    contents = set()
    for folder in folders:
        try:
            content = (folder / SKILL_FILE).read_bytes()[:MAX_SKILL_MD]
        except OSError:
            continue
        contents.add(content)
        names.add(listed_as(content, folder.name))
    return names, contents


def _versions_under_test(study: Study) -> tuple[set[str], set[bytes]]:
    """Every version's listed name and SKILL.md (a version at a git ref: as of that ref)."""
    arms = study.prereg.arms
    assert arms is not None
    names, contents = {study.prereg.skill}, set()
    for n, v in arms.versions.items():
        try:
            whole = versions.ref_files(study, n)[SKILL_FILE] if study.from_git(n) else _read(study.version_dir(n))
        except OSError:
            continue
        content = whole[:MAX_SKILL_MD]
        contents.add(content)
        names.add(listed_as(content, PurePosixPath(v.path).name))
    return names, contents


def _read(folder: Path) -> bytes:
    return (folder / SKILL_FILE).read_bytes()


def _keep_included(study: Study, excluded: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``execution.include_paths`` applied: (still left out, kept in -> why it would have been left out)."""
    left = dict(excluded)
    kept: dict[str, str] = {}
    for i, wanted in enumerate(study.prereg.execution.include_paths):
        wanted = wanted.rstrip("/")
        hits = [p for p in left if _under(p, wanted)]
        inside = [p for p in excluded if _under(wanted, p) and wanted != p]
        if inside:
            raise ConfigError(
                study.prereg_path,
                f"{wanted!r} is inside {inside[0]!r}, which is left out as a whole ({excluded[inside[0]]})",
                field=f"execution.include_paths[{i}]",
                hint=f"keep the whole folder in with include_paths: [{inside[0]}], or leave the path out",
            )
        if not hits:
            raise ConfigError(
                study.prereg_path,
                f"{wanted!r} is not left out of the base tree, so keeping it in changes nothing (left out: "
                f"{', '.join(sorted(excluded)) or 'nothing'})",
                field=f"execution.include_paths[{i}]",
            )
        for p in hits:
            kept[p] = left.pop(p)
    return left, kept


def _visible(
    entries: Iterable[str],
    skill_md: Iterable[str],
    blobs: Mapping[str, bytes],
    excluded: Mapping[str, str],
    kept: Mapping[str, str],
) -> dict[str, str]:
    def hidden(path: str) -> bool:
        return any(_under(path, q) for q in excluded)

    out: dict[str, str] = {p: f"kept in by execution.include_paths: {why}" for p, why in kept.items()}
    for path in entries:
        name = path.rpartition("/")[2]
        if (name not in INSTRUCTION_FILES and "/.claude/" not in f"/{path}") or hidden(path):
            continue
        parts = path.split("/")
        if parts[-1] in INSTRUCTION_FILES:
            out.setdefault(path, "instructions for agents")
        if ".claude" in parts[:-1]:
            where = "/".join(parts[: parts.index(".claude") + 1])
            out.setdefault(where, "Claude Code project settings, skills, commands or agents")
    for path in skill_md:
        folder = _folder_of(path)
        if hidden(path) or folder in out:
            continue
        content = blobs.get(path, b"")
        out[folder or path] = f"another skill, SKILL.md name {listed_as(content, folder or '.')!r}"
    return dict(sorted(out.items()))


def relative_to_top(repo: Path, path: Path) -> str | None:
    """``path`` relative to the top of ``repo``'s repository, or None when it is outside."""
    try:
        return path.resolve().relative_to(gitops.repo_top(repo).resolve()).as_posix()
    except ValueError:
        return None


def in_base_tree(repo: Path, base_sha: str, rel: str) -> bool:
    """Whether ``rel`` (a path from the repository's top) is a file of ``base_sha``'s tree."""
    return gitops.git(["cat-file", "-t", f"{base_sha}:{rel}"], cwd=repo, check=False).strip() == "blob"


SHOWN = 20
"""The most paths one line names (the rest are counted)."""


def describe(excluded: Mapping[str, str], visible: Mapping[str, str]) -> list[str]:
    """What ``skilltrial lock`` prints and every report notes: what no trial saw, and what both arms saw that
    can change an agent's behaviour (one line each, when there is any)."""
    lines = []
    if excluded:
        lines.append(
            "left out of every trial's tree (the agent's workspace in both arms, verify, the preflight): "
            + _listed(excluded)
        )
    if visible:
        lines.append(
            "both arms see these, which can change what an agent does (the skill arm no more than the baseline): "
            + _listed(visible)
        )
    return lines


def _listed(items: Mapping[str, str]) -> str:
    shown = [f"{path} ({why})" for path, why in sorted(items.items())[:SHOWN]]
    more = f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return "; ".join(shown) + more
