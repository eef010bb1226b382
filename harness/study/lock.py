"""Freezing a preregistration before any trial runs.

``skilltrial lock`` writes a lock file beside the preregistration
(``preregistration.yaml.lock``, JSON): when it was locked, the base commit the
trials start from, and a SHA-256 over the preregistration (its parsed fields),
the tasks, every file of the skill folder and the analysis settings. ``eval``
recomputes it and refuses to run when anything differs, naming what changed.
Changing anything means a new lock, a new experiment: every result line
carries the lock hash.

The preregistration itself is never rewritten: appending a block as text broke
valid YAML (flow style, JSON syntax, a ``...`` end marker, a ``|+`` scalar), and
re-serialising would drop the author's comments. A preregistration locked by
the earlier format (a ``lock:`` block at its end) still verifies; locking it
again moves the lock into the lock file. The lock file's format (where it is, reading and
writing a :class:`~harness.study.config.LockBlock`) is :mod:`harness.study.config`'s, which loads a
preregistration together with its lock.
"""

from __future__ import annotations

import copy as pycopy
import datetime as dt
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from harness.errors import ConfigError, LockError
from harness.host.files import atomic_write
from harness.host.gitops import resolve_commit
from harness.host.trees import remove_tree
from harness.study.basetree import BaseTreeSurvey, survey
from harness.study.config import (
    LockBlock,
    Study,
    check_host_fits,
    load_study,
    lock_file_bytes,
    lock_path,
    parse_yaml,
    read_text,
)
from harness.study.skillname import front_matter_name, listed_name
from harness.study.versions import CONTROL_FILES, MAX_SKILL_FILE, MAX_SKILL_FILES, ref_files

LOCK_KEY = re.compile(r"^lock\s*:")
LOCK_COMMENT = "# Written by `skilltrial lock`; any edit above invalidates it."
BASE_TREE = "base/tree"
"""The lock's entry for what it found in the base tree (``base_excluded``, ``base_visible``)."""


def skill_files(skill_dir: Path) -> dict[str, bytes]:
    """Every regular file of the skill folder (relative path -> bytes). Symlinks are refused:
    a 'skill file' pointing at ~/.ssh/id_ed25519 must never be hashed, copied or mounted. So is
    anything that is not a plain directory or a plain file with exactly one link: a hard link
    (``ln ~/.ssh/id_ed25519 skills/x/notes.md``) is a second name of a file outside the skill."""
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(skill_dir, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in {".git", "__pycache__"})
        for d in dirnames:  # os.walk lists a symlink to a directory here, never descending into it
            if os.path.islink(Path(dirpath) / d):
                raise ConfigError(Path(dirpath) / d, "skill folders may not contain symlinks", field="skill_ref")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(skill_dir).as_posix()
            files[rel] = read_plain_file(path)
            if len(files) > MAX_SKILL_FILES:
                raise ConfigError(skill_dir, f"has more than {MAX_SKILL_FILES} files", field="skill_ref")
    return files


def plain_file_problem(st: os.stat_result) -> str | None:
    """Why a skill-folder entry with this ``lstat``/``fstat`` is not a plain file, else None."""
    if stat.S_ISLNK(st.st_mode):
        return "skill folders may not contain symlinks"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (skill folders hold only plain files and directories)"
    if st.st_nlink != 1:
        return (
            f"has {st.st_nlink} hard links: a hard link is another name of a file that may live outside "
            "the skill folder (copy the file instead of linking it)"
        )
    if st.st_size > MAX_SKILL_FILE:
        return f"is larger than {MAX_SKILL_FILE} bytes"
    return None


def read_plain_file(path: Path) -> bytes:
    """The bytes of one skill file, refused unless it is a plain, singly linked regular file.
    Checked before opening (never open a FIFO or follow a link) and again on the open descriptor
    (the entry may have been swapped in between)."""
    before = os.lstat(path)
    problem = plain_file_problem(before)
    if problem:
        raise ConfigError(path, problem, field="skill_ref")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise ConfigError(path, f"cannot be opened as a plain file: {e.strerror}", field="skill_ref") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        problem = plain_file_problem(st)
        if problem is None and (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            problem = "was replaced while it was being read"
        if problem:
            raise ConfigError(path, problem, field="skill_ref")
        data = fh.read(MAX_SKILL_FILE + 1)
    if len(data) > MAX_SKILL_FILE:
        raise ConfigError(path, f"is larger than {MAX_SKILL_FILE} bytes", field="skill_ref")
    return data


def copy_skill(files: dict[str, bytes], dest: Path) -> Path:
    """Write the locked skill files into a controller-owned, read-only folder (mounted at /skill)."""
    dest.mkdir(mode=0o755, parents=True, exist_ok=False)
    for rel, data in files.items():
        target = dest / rel
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    for dirpath, _dirnames, _files in os.walk(dest):
        os.chmod(dirpath, 0o555)
    return dest


def study_skill_files(study: Study) -> dict[str, bytes]:
    """The skill's files, without the experiment's own control files when they live inside the
    skill folder (a preregistration there changes when it is locked; it is hashed on its own)."""
    check_skill_ref(study)
    return _folder_files(study, study.skill_dir)


def _folder_files(study: Study, folder: Path) -> dict[str, bytes]:
    own = {study.prereg_path.resolve(), study.tasks_path.resolve(), lock_path(study.prereg_path).resolve()}
    out = {}
    for rel, data in skill_files(folder).items():
        path = (folder / rel).resolve()
        if path in own or Path(rel).name in CONTROL_FILES:
            continue
        out[rel] = data
    return out


def locked_skill_files(study: Study) -> dict[str, bytes]:
    """What the lock covers of the skill, by lock entry name: ``skill/<path>``, or with ``arms`` every version's
    files as ``version/<name>/<path>`` (the same entries from the whole study and from each variant's)."""
    arms = study.locked_prereg.arms
    if arms is None:
        return {f"skill/{rel}": data for rel, data in study_skill_files(study).items()}
    out: dict[str, bytes] = {}
    for name in arms.versions:
        out.update({f"version/{name}/{rel}": data for rel, data in version_files(study, name).items()})
    return out


def version_files(study: Study, name: str) -> dict[str, bytes]:
    """One version's files (``arms``): from git objects for a version at a ref not yet written into a folder of
    the run's, else from its folder (a run's copy, or the folder as it is)."""
    arms = study.locked_prereg.arms
    assert arms is not None
    if study.from_git(name):
        return ref_files(study, name)
    if name not in study.version_copies:
        _check_not_linked(study, arms.versions[name].path, f"arms.versions.{name}.path")
    return _folder_files(study, study.version_dir(name))


def materialize(study: Study, dest: Path) -> Study:
    """The study with every version named by a git ref written into ``dest/<name>`` (controller-owned, read-only;
    rewritten when it exists) and the whole checked against the lock: what a run mounts is what was locked."""
    arms = study.locked_prereg.arms
    if arms is None or not any(v.ref is not None for v in arms.versions.values()):
        return study
    out = pycopy.copy(study)
    out.version_copies = dict(study.version_copies)
    for name, version in arms.versions.items():
        if version.ref is None or name in out.version_copies:
            continue
        target = (dest / name).resolve()
        if os.path.lexists(target):
            remove_tree(target)
        out.version_copies[name] = copy_skill(ref_files(study, name), target)
    verify_lock(out)
    return out


def check_skill_ref(study: Study) -> None:
    """Refuse a ``skill_ref`` that is, or passes through, a symbolic link: what is locked, copied
    and (on rejection) shelved must be the folder the preregistration names, inside the study's
    own tree, never a folder elsewhere that a link happens to point at."""
    lib, sel = study.prereg.library, study.prereg.selection
    ref, field = (lib.path, "library.path") if lib is not None else (study.prereg.skill_ref or "", "skill_ref")
    if sel is not None:
        ref, field = sel.library, "selection.library"
    if study.prereg.arms is not None and study.prereg.skill_ref is None:  # the whole family: every version's
        return
    _check_not_linked(study, ref, field)


def _check_not_linked(study: Study, ref: str, field: str) -> None:
    written = Path(os.path.abspath(study.root / ref))
    if written.resolve() != written:
        raise ConfigError(
            study.prereg_path,
            f"skill folder {written} is a symbolic link (or reached through one) to {written.resolve()}",
            field=field,
            hint=f"name the folder itself in {field}, not a link to it",
        )


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """The stable encoding every hash of settings is taken over (lock hash, baseline fingerprint)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


LibraryEntries = Callable[[Study, str], Mapping[str, str]]
"""What a library experiment adds to its lock, given the study and the base commit: the estimator, the drawn
masks and the reused baseline data (:func:`harness.experiment.library_plan.lock_entries`, which also refuses
a reused baseline that cannot serve this base commit). Computing them takes the analysis and the results
layers, which sit above this one, so every caller that may lock or verify a library preregistration passes
the function in; without it a library preregistration is refused (a lock without them would not cover
what the run depends on)."""


def _library_entries(study: Study, entries: LibraryEntries | None, base_sha: str) -> Mapping[str, str]:
    if study.prereg.library is None:
        return {}
    if entries is None:
        raise TypeError(
            f"{study.prereg_path} is a library preregistration: its lock covers the library's design, so pass "
            "library_entries=harness.experiment.library_plan.lock_entries"
        )
    return entries(study, base_sha)


class LockDigest(NamedTuple):
    sha256: str
    """The lock hash: over ``files``, the base commit and the lock format."""
    files: dict[str, str]
    """What it covers, by name (``preregistration``, ``tasks``, ``analysis``, ``skill/<path>``, ``library/...``)."""


def lock_digest(
    study: Study,
    base_sha: str,
    library_entries: LibraryEntries | None = None,
    base_tree: BaseTreeSurvey | None = None,
) -> LockDigest:
    """The lock hash and the per-file digests it covers (see :data:`LibraryEntries`); ``base_tree`` is what
    the lock found in the base commit's tree (:func:`harness.study.basetree.survey`; verifying: the lock's)."""
    prereg = study.locked_prereg.model_dump(mode="json", exclude={"lock"})
    # fields added after the first locks count only when set, so locks made before them stay valid
    for key in ("prices", "include_paths"):
        if not prereg["execution"].get(key):
            prereg["execution"].pop(key, None)
    if not prereg["execution"].get("models"):
        prereg["execution"].pop("models", None)
    if prereg["decision"].get("models_rule") == "every":
        prereg["decision"].pop("models_rule", None)
    if prereg["decision"].get("futility_stop") is True:
        prereg["decision"].pop("futility_stop", None)
    if prereg["decision"].get("sequential") is None:
        prereg["decision"].pop("sequential", None)
    for key in ("split", "arms", "selection"):  # issue 28's fields, too, count only when set
        if prereg.get(key) is None:
            prereg.pop(key, None)
    tasks = study.task_file.model_dump(mode="json")
    for task in tasks["tasks"]:  # a task's split, too, counts only when set
        if task.get("split") is None:
            task.pop("split", None)
    files = {
        "preregistration": sha256_hex(canonical_json(prereg)),
        "tasks": sha256_hex(canonical_json(tasks)),
        "analysis": sha256_hex(canonical_json(prereg["decision"])),
    }
    for name, data in locked_skill_files(study).items():
        files[name] = sha256_hex(data)
    files.update(
        _library_entries(study, library_entries, base_sha)
    )  # the estimator, the drawn masks, the reused baseline
    if base_tree is not None and (base_tree.excluded or base_tree.visible):
        files[BASE_TREE] = sha256_hex(canonical_json({"excluded": base_tree.excluded, "visible": base_tree.visible}))
    whole = sha256_hex(canonical_json({"files": files, "base_sha": base_sha, "lock_format": 1}))
    return LockDigest(whole, files)


def strip_lock_block(text: str) -> str:
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if LOCK_KEY.match(line):
            skipping = True
            continue
        if line.rstrip("\r\n") == LOCK_COMMENT:
            continue
        if skipping and (line.startswith((" ", "\t")) or not line.strip()):
            continue
        skipping = False
        out.append(line)
    body = "".join(out)
    return body if body.endswith("\n") or not body else body + "\n"


def drop_legacy_lock_block(prereg_path: Path) -> None:
    """Remove a ``lock:`` block the earlier format appended to the preregistration, when removing it
    changes nothing else the file says; otherwise ask for it to be removed by hand."""
    text = read_text(prereg_path)
    data = parse_yaml(prereg_path, text)
    if not isinstance(data, dict) or not isinstance(data.get("lock"), dict):
        return  # no block (a 'lock: null' is left as the author wrote it)
    stripped = strip_lock_block(text).rstrip("\n") + "\n"
    try:
        again = parse_yaml(prereg_path, stripped)
    except ConfigError:
        again = None
    if again != {k: v for k, v in data.items() if k != "lock"}:
        raise ConfigError(
            prereg_path,
            "holds a lock block in the earlier format that cannot be removed automatically",
            field="lock",
            hint=f"delete the lock: block by hand; the lock is now written to {lock_path(prereg_path).name}",
        )
    _write(prereg_path, stripped.encode("utf-8"))


class Locked(NamedTuple):
    sha256: str
    """The lock hash every result line will carry."""
    base_sha: str
    """The commit the trials start from."""


def lock(prereg_path: Path, *, now: dt.datetime | None = None, library_entries: LibraryEntries | None = None) -> Locked:
    """Write the lock file beside the preregistration (see :func:`~harness.study.config.lock_path`).

    Every input is checked before anything is written; the preregistration is left as it is
    (except that a lock block of the earlier format is moved out of it). A damaged lock file is replaced."""
    study = load_study(prereg_path, read_lock=False)
    check_host_fits(study)
    base_sha = resolve_commit(study.repo_path, study.prereg.execution.base_ref, source=study.prereg_path)
    base_tree = survey(study, base_sha)
    digest, files = lock_digest(study, base_sha, library_entries, base_tree)
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    listed = None if study.prereg.library is not None else listed_name(study.skill_dir, study.prereg.skill)
    _check_versions_listed_alike(study)
    block = LockBlock(
        locked_at=when,
        sha256=digest,
        base_sha=base_sha,
        files=files,
        listed_name=listed,
        base_excluded=base_tree.excluded,
        base_visible=base_tree.visible,
    )
    target = lock_path(study.prereg_path)
    if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
        raise ConfigError(target, "exists and is not a regular file; remove it and lock again")
    drop_legacy_lock_block(study.prereg_path)
    _write(target, lock_file_bytes(block))
    return Locked(digest, base_sha)


def _check_versions_listed_alike(study: Study) -> None:
    """With the installed delivery every version of ``arms`` must be listed under one name: each arm's listing
    check looks for its own version under the name the skill is listed by, and the reports compare one skill."""
    arms = study.prereg.arms
    if arms is None or study.prereg.execution.delivery != "installed":
        return
    names = {}
    for n in arms.versions:
        text = version_files(study, n).get("SKILL.md", b"").decode("utf-8", "replace")
        names[n] = front_matter_name(text) or study.prereg.skill
    first = next(iter(names.values()))
    for n, name in names.items():
        if name != first:
            raise ConfigError(
                study.prereg_path,
                f"version {n} is listed as {name!r}, the others as {first!r} (SKILL.md's front matter name)",
                field=f"arms.versions.{n}.path",
                hint="versions of one skill carry one name; give them the same front matter name",
            )


def _write(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as e:  # a read-only folder, a file name too long for the temporary copy
        raise ConfigError(path, f"cannot be written: {e.strerror}") from None


def verify_lock(study: Study, library_entries: LibraryEntries | None = None) -> LockBlock:
    """The study's lock (its ``sha256`` is the lock hash), after checking that nothing it covers has changed."""
    block = study.prereg.lock
    if block is None:
        raise LockError(
            f"{study.prereg_path} is not locked",
            hint=f"run `skilltrial lock {study.prereg_path}` first; a preregistration is frozen before any trial runs",
        )
    digest, files = lock_digest(study, block.base_sha, library_entries, recorded_base_tree(block))
    if digest != block.sha256:
        changed = sorted(k for k in set(files) | set(block.files) if files.get(k) != block.files.get(k))
        if changed == [BASE_TREE]:
            raise LockError(
                f"{_lock_source(study)}: field 'base_excluded': what the lock records about the base tree "
                "(base_excluded, base_visible) is not what it hashed: the lock itself was edited",
                hint=f"re-run `skilltrial lock {study.prereg_path}` and evaluate into a new --out",
            )
        if not changed:
            raise LockError(
                f"{_lock_source(study)}: field 'sha256': the recorded lock hash {block.sha256[:16]}... is not the "
                f"hash of the files and base commit the lock lists ({digest[:16]}...): the lock itself was "
                "edited or corrupted",
                hint=f"re-run `skilltrial lock {study.prereg_path}` and evaluate into a new --out",
            )
        raise LockError(
            f"{study.prereg_path} was edited after it was locked; changed since lock: {', '.join(changed)}",
            hint="a changed preregistration is a new experiment: re-run `skilltrial lock` and evaluate into a new --out",
        )
    return block


def recorded_base_tree(block: LockBlock) -> BaseTreeSurvey:
    """What the lock recorded about the base tree (nothing for a lock made before it recorded it)."""
    return BaseTreeSurvey(dict(block.base_excluded), dict(block.base_visible))


def _lock_source(study: Study) -> Path:
    """The file the study's lock was read from: the lock file, or the preregistration (earlier format)."""
    path = lock_path(study.prereg_path)
    return path if os.path.lexists(path) else study.prereg_path


class _StudyOnCopy(Study):
    """The same study with its skill folder replaced by the controller-owned copy."""

    def __init__(self, study: Study, copy: Path) -> None:
        super().__init__(study.prereg_path, study.prereg, study.task_file)
        self.locked_prereg = study.locked_prereg
        self.variant = study.variant  # a variant's version is read from the copy, the others from their folders
        self.version_copies = dict(study.version_copies)
        self._copy = copy

    @property
    def skill_dir(self) -> Path:
        return self._copy


def locked_version_sha256(study: Study, name: str) -> str:
    """A hash of one version's files as the lock covers them (``version/<name>/...``): what a baseline carrying
    that version adds to its fingerprint."""
    prefix = f"version/{name}/"
    files = {k: sha256_hex(v) for k, v in locked_skill_files(study).items() if k.startswith(prefix)}
    return sha256_hex(canonical_json(files))


def copy_locked_version(study: Study, name: str, dest: Path) -> Path:
    """Copy one version's files (``arms``) once into the controller-owned ``dest`` and check *the copy* against
    the lock, as :func:`copy_locked_skill` does for the skill: the baseline's version under version against
    version."""
    copy = copy_skill(version_files(study, name), dest)
    checked = pycopy.copy(study)
    checked.version_copies = {**study.version_copies, name: copy}
    try:
        verify_lock(checked)
    except LockError as e:
        raise LockError(
            f"{study.version_dir(name)} changed after eval checked its lock: {e.message}",
            hint="a changed skill is a new experiment: re-run `skilltrial lock` and evaluate into a new --out",
        ) from None
    return copy


def copy_locked_skill(study: Study, dest: Path, library_entries: LibraryEntries | None = None) -> Path:
    """Copy the skill's files once into the controller-owned ``dest``, then check *the copy*
    against the lock; only the copy is mounted. A file swapped in the user's folder after eval's
    first lock check either lands in the copy (and fails this check) or is never seen.
    The preregistration and tasks are parsed once into the study, whose in-memory models are
    both what the lock hash covers and what the run uses."""
    copy = copy_skill(study_skill_files(study), dest)
    try:
        verify_lock(_StudyOnCopy(study, copy), library_entries)
    except LockError as e:
        raise LockError(
            f"{study.skill_dir} changed after eval checked its lock: {e.message}",
            hint="the skill folder must not change during a run; re-run `skilltrial lock` and evaluate into a new --out",
        ) from None
    return copy
