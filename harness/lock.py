"""Freezing a preregistration before any trial runs.

``harness lock`` appends a ``lock:`` block to the preregistration: when it was
locked, the base commit the trials start from, and a SHA-256 over the
preregistration (without the block), the tasks, every file of the skill folder
and the analysis settings. ``eval`` recomputes it and refuses to run when
anything differs, naming what changed. Changing anything means a new lock, a
new experiment: every result line carries the lock hash.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from harness.config import Study, load_study
from harness.errors import ConfigError, LockError
from harness.gitops import resolve_commit
from harness.store import atomic_write

LOCK_KEY = re.compile(r"^lock\s*:")
LOCK_COMMENT = "# Written by `harness lock`; any edit above invalidates it."
MAX_SKILL_FILE = 1 << 20
MAX_SKILL_FILES = 200


def skill_files(skill_dir: Path) -> dict[str, bytes]:
    """Every regular file of the skill folder (relative path -> bytes). Symlinks are refused:
    a 'skill file' pointing at ~/.ssh/id_ed25519 must never be hashed, copied or mounted."""
    files: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(skill_dir, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in {".git", "__pycache__"})
        for d in dirnames:  # os.walk lists a symlink to a directory here, never descending into it
            if os.path.islink(Path(dirpath) / d):
                raise ConfigError(Path(dirpath) / d, "skill folders may not contain symlinks", field="skill_ref")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(skill_dir).as_posix()
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                raise ConfigError(path, "skill folders may not contain symlinks", field="skill_ref")
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(path, "is not a regular file", field="skill_ref")
            if st.st_size > MAX_SKILL_FILE:
                raise ConfigError(path, f"is larger than {MAX_SKILL_FILE} bytes", field="skill_ref")
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                files[rel] = fh.read(MAX_SKILL_FILE + 1)
            if len(files) > MAX_SKILL_FILES:
                raise ConfigError(skill_dir, f"has more than {MAX_SKILL_FILES} files", field="skill_ref")
    return files


CONTROL_FILES = ("skills-ledger.yaml", ".skills-ledger.yaml.lock")


def study_skill_files(study: Study) -> dict[str, bytes]:
    """The skill's files, without the experiment's own control files when they live inside the
    skill folder (a preregistration there changes when it is locked; it is hashed on its own)."""
    own = {study.prereg_path.resolve(), study.tasks_path.resolve()}
    out = {}
    for rel, data in skill_files(study.skill_dir).items():
        path = (study.skill_dir / rel).resolve()
        if path in own or Path(rel).name in CONTROL_FILES:
            continue
        out[rel] = data
    return out


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """The stable encoding every hash of settings is taken over (lock hash, baseline fingerprint)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def fingerprint(study: Study, base_sha: str) -> tuple[str, dict[str, str]]:
    """The lock hash and the per-file digests it covers."""
    prereg = study.prereg.model_dump(mode="json", exclude={"lock"})
    tasks = study.task_file.model_dump(mode="json")
    files = {
        "preregistration": sha256_hex(canonical_json(prereg)),
        "tasks": sha256_hex(canonical_json(tasks)),
        "analysis": sha256_hex(canonical_json(prereg["decision"])),
    }
    for rel, data in study_skill_files(study).items():
        files[f"skill/{rel}"] = sha256_hex(data)
    if study.prereg.library is not None:  # the estimator, the drawn masks and the reused baseline data
        from harness.library import lock_entries

        files.update(lock_entries(study))
    whole = sha256_hex(canonical_json({"files": files, "base_sha": base_sha, "lock_format": 1}))
    return whole, files


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


def lock(prereg_path: Path, *, now: dt.datetime | None = None) -> tuple[str, str]:
    """Write the lock block into the preregistration. Returns (sha256, base_sha)."""
    study = load_study(prereg_path)
    base_sha = resolve_commit(study.repo_path, study.prereg.execution.base_ref, source=study.prereg_path)
    digest, files = fingerprint(study, base_sha)
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    block = {"lock": {"locked_at": when, "sha256": digest, "base_sha": base_sha, "files": files}}
    text = strip_lock_block(study.prereg_path.read_text(encoding="utf-8")).rstrip("\n") + "\n"
    new = text + f"\n{LOCK_COMMENT}\n"
    new += yaml.safe_dump(block, sort_keys=False, default_flow_style=False)
    atomic_write(study.prereg_path, new.encode("utf-8"))
    return digest, base_sha


def verify_lock(study: Study) -> str:
    """The lock hash, after checking that nothing it covers has changed."""
    block = study.prereg.lock
    if block is None:
        raise LockError(
            f"{study.prereg_path} is not locked",
            hint=f"run `harness lock {study.prereg_path}` first; a preregistration is frozen before any trial runs",
        )
    digest, files = fingerprint(study, block.base_sha)
    if digest != block.sha256:
        changed = sorted(k for k in set(files) | set(block.files) if files.get(k) != block.files.get(k)) or [
            "(the base commit or the lock format)"
        ]
        raise LockError(
            f"{study.prereg_path} was edited after it was locked; changed since lock: {', '.join(changed)}",
            hint="a changed preregistration is a new experiment: re-run `harness lock` and evaluate into a new --out",
        )
    return digest
