"""A version of the skill named by a git ref (``arms.versions.<name>.ref``): its files, read from git objects.

``{path: skills/review, ref: v1.4}`` is the folder ``skills/review`` as of the commit ``v1.4`` names in the
repository that holds it, read with ``git ls-tree`` and ``git cat-file`` (never checked out, no hook or filter
of the user's runs), under the rules a folder's files follow (:mod:`harness.study.lock`): regular files only
(a symbolic link or a submodule is refused), at most :data:`MAX_SKILL_FILES` files of at most
:data:`MAX_SKILL_FILE` bytes, a SKILL.md at the top. The lock hashes these bytes exactly as it hashes a folder's,
so a branch that moves to a commit with other content is a changed experiment, one that moves to the same
content is not. A run writes them once into a controller-owned folder (:func:`harness.study.lock.materialize`)
and checks that copy against the lock before anything is mounted.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import ConfigError
from harness.host import gitops
from harness.study.config import Study

MAX_SKILL_FILE = 1 << 20
MAX_SKILL_FILES = 200
SKILL_FILE = "SKILL.md"
CONTROL_FILES = ("skills-ledger.yaml", ".skills-ledger.yaml.lock")
_REGULAR = ("100644", "100755")


def _repository(study: Study, name: str, path: str) -> tuple[Path, str]:
    """The top of the repository holding version ``name``'s ``path`` (relative to the preregistration), and
    ``path`` from there."""
    target = Path(os.path.abspath(study.root / path))
    probe = target
    while not probe.is_dir() and probe != probe.parent:  # the folder need not exist in the working tree
        probe = probe.parent
    found = gitops.git(["rev-parse", "--show-toplevel"], cwd=probe, check=False).strip()
    if not found:
        raise ConfigError(study.prereg_path, f"{target} is not in a git repository: a version at a git ref is "
                          "read from the repository its folder is in", field=f"arms.versions.{name}.ref")  # fmt: skip
    top = Path(found)
    rel = os.path.relpath(target, top)
    if rel == "." or rel.startswith(".."):
        raise ConfigError(study.prereg_path, f"{target} is not a folder inside the repository {top}",
                          field=f"arms.versions.{name}.path")  # fmt: skip
    return top, Path(rel).as_posix()


def ref_files(study: Study, name: str) -> dict[str, bytes]:
    """The files of version ``name`` as of its ref (relative paths inside the version's folder -> bytes)."""
    arms = study.locked_prereg.arms
    assert arms is not None
    version = arms.versions[name]
    assert version.ref is not None
    field = f"arms.versions.{name}.ref"
    top, rel = _repository(study, name, version.path)
    sha = gitops.resolve_commit(top, version.ref, source=study.prereg_path, field=field)
    own = {
        Path(os.path.relpath(p.resolve(), top)).as_posix()
        for p in (study.prereg_path, study.tasks_path, study.prereg_path.with_name(study.prereg_path.name + ".lock"))
    }
    wanted: list[str] = []
    for mode, path in gitops.tree_entries(top, sha):
        if not path.startswith(rel + "/"):
            continue
        inner = path[len(rel) + 1 :]
        if mode not in _REGULAR:
            why = "a symbolic link" if mode == "120000" else "a submodule" if mode == "160000" else f"mode {mode}"
            raise ConfigError(study.prereg_path, f"{path} at {version.ref} is {why}: skill folders hold only plain "
                              "files and directories", field=field)  # fmt: skip
        if path in own or Path(inner).name in CONTROL_FILES:
            continue
        wanted.append(path)
        if len(wanted) > MAX_SKILL_FILES:
            raise ConfigError(study.prereg_path, f"{rel} at {version.ref} has more than {MAX_SKILL_FILES} files",
                              field=field)  # fmt: skip
    blobs = gitops.read_blobs(top, sha, wanted, MAX_SKILL_FILE + 1)
    out: dict[str, bytes] = {}
    for path in wanted:
        data = blobs.get(path)
        if data is None:
            raise ConfigError(study.prereg_path, f"{path} at {version.ref} cannot be read", field=field)
        if len(data) > MAX_SKILL_FILE:
            raise ConfigError(study.prereg_path, f"{path} at {version.ref} is larger than {MAX_SKILL_FILE} bytes",
                              field=field)  # fmt: skip
        out[path[len(rel) + 1 :]] = data
    if SKILL_FILE not in out:
        raise ConfigError(study.prereg_path, f"{rel} has no {SKILL_FILE} at {version.ref} ({sha[:12]})", field=field)
    return dict(sorted(out.items()))
