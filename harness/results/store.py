"""The experiment directory: append-only results, content-addressed artifacts.

Layout of an experiment directory::

    experiment.json        what was locked and how the run was set up (see harness.results.meta)
    results.jsonl          one TrialRecord per attempt, append-only, never rewritten (harness.records.RESULTS)
    artifacts/ab/abcd...   patch, verify output, agent and judge JSON, by sha256
    report.md, report.html, junit.xml, decision.json   (rendered from results.jsonl)

What is rendered from the results is derived: an experiment directory made with ``derived`` names removes
those files before it appends its first result line, so a report never outlives the results it was computed
from, even when the controller is killed before it renders the new ones (harness.reporting.outputs).

Crash safety: each record is serialised first and written with one ``write``
on an ``O_APPEND`` descriptor, then fsync'd, under an ``flock``. Opening the log
repairs a torn last line (a crash mid-write) by moving the unterminated tail to
``results.jsonl.torn-<n>``; the lines before it are never touched. Everything
written passes through the redactor first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from harness.errors import ResultsUnavailable, ResumeError
from harness.host.files import atomic_write, read_regular, remove_files, write_all
from harness.records import RESULTS, TRIGGER_RESULTS, TrialRecord, TriggerRecord
from harness.redact import Redactor


@dataclass
class ReadReport:
    records: list[TrialRecord] = field(default_factory=list)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    torn_tail: bool = False


def repair_torn_tail(path: Path) -> bool:
    """Move an unterminated last line aside. Returns True when something was repaired."""
    if not path.exists():
        return False
    with open(path, "rb+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size == 0:
            return False
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return False
        # find the last newline; everything after it is the torn tail
        pos = size
        block = 65536
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        fh.seek(keep)
        tail = fh.read()
        n = 1
        while (aside := path.with_name(f"{path.name}.torn-{n}")).exists():
            n += 1
        aside.write_bytes(tail)
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
    return True


class ResultsLog:
    """The single writer of results.jsonl (and of a trigger study's triggers.jsonl). ``before_first_append``
    runs once, before the first line this writer appends (concurrent trials append from several threads)."""

    def __init__(self, path: Path, redactor: Redactor, before_first_append: Callable[[], object] | None = None) -> None:
        self.path = path
        self.redactor = redactor
        self.repaired = repair_torn_tail(path)
        self._before_first = before_first_append
        self._first = threading.Lock()

    def append(self, record: TrialRecord | TriggerRecord) -> None:
        if self._before_first is not None:
            with self._first:
                if self._before_first is not None:
                    self._before_first()
                    self._before_first = None
        line = self.redactor.text(record.model_dump_json()) + "\n"
        data = line.encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> ReadReport:
        return read_results(self.path)


def read_results(path: Path) -> ReadReport:
    """Parse every complete line; report (not raise on) bad lines; ignore a torn tail. A file that is there
    but cannot be read (a directory, no permission) is :class:`ResultsUnavailable`, naming it."""
    report = ReadReport()
    if not path.exists():
        return report
    try:
        raw = read_regular(path)
    except OSError as e:
        raise ResultsUnavailable(f"{path} cannot be read: {e.strerror}") from e
    lines = raw.split(b"\n")
    if lines and lines[-1] != b"":
        report.torn_tail = True
    for number, line in enumerate(lines[:-1], start=1):
        if not line.strip():
            continue
        try:
            report.records.append(TrialRecord.model_validate_json(line))
        except (ValidationError, ValueError) as e:
            report.bad_lines.append((number, str(e).splitlines()[0][:200]))
    return report


class ArtifactStore:
    """Content-addressed blobs: name in the record, bytes under artifacts/<2>/<sha256>."""

    def __init__(self, root: Path, redactor: Redactor) -> None:
        self.root = root
        self.redactor = redactor

    def put(self, data: bytes) -> str:
        data = self.redactor.data(data)
        digest = hashlib.sha256(data).hexdigest()
        target = self.root / digest[:2] / digest
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data)
        return digest

    def get(self, digest: str) -> bytes:
        return read_regular(self.root / digest[:2] / digest)


class ExperimentDir:
    """An experiment directory being written: its results log and artifacts. ``derived`` names the files
    rendered from its results (reports, decision.json): they are removed before the first new result line,
    so none of them can describe results that have since changed."""

    def __init__(self, root: Path, redactor: Redactor, derived: Collection[str] = ()) -> None:
        self.root = root
        self.redactor = redactor
        self.root.mkdir(parents=True, exist_ok=True)
        names = tuple(derived)
        self.results = ResultsLog(root / RESULTS, redactor, (lambda: remove_files(root, names)) if names else None)
        self.artifacts = ArtifactStore(root / "artifacts", redactor)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the experiment lock: two controllers must never write one experiment."""
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ResumeError(
                    f"another harness process is running experiment {self.root}",
                    hint="wait for it to finish, or use another --out directory",
                ) from None
            yield
        finally:
            os.close(fd)


class TriggerDir:
    """A trigger study's output directory: ``triggers.jsonl`` (one :class:`~harness.records.TriggerRecord` per
    run, through the single writer) and what is rendered from it (:mod:`harness.reporting.triggers`), the
    scripted model's log; everything through ``redactor``."""

    def __init__(self, root: Path, redactor: Redactor) -> None:
        self.root = root
        self.redactor = redactor
        self.root.mkdir(parents=True, exist_ok=True)
        self.results = ResultsLog(root / TRIGGER_RESULTS, redactor)
