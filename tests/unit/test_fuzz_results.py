"""Property-based fuzz of the commands that read a results directory: ``report``, ``gate``, ``history`` and
``merge`` over an experiment, a family of variants and a model matrix whose files were damaged (cut short,
a garbage line, a JSON field replaced, a byte flipped, removed, replaced by a directory, a FIFO or a link to
``/dev/zero``). Each command exits with one of its documented codes (0 to 4) and a message, never a
traceback, a hang or an endless read (an alarm and a cap on the address space are the backstops).

Found this way, and fixed: a non-UTF-8 byte in a JSON file, ``results.jsonl`` as a directory, and any of
them linked to ``/dev/zero`` (read until the machine's memory ran out). ``HARNESS_FUZZ_EXAMPLES`` runs more.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import cli
from tests.factories import write_experiment, write_family, write_matrix
from tests.unit.test_family_report import STRONG, WEAK, spec
from tests.unit.test_fuzz_inputs import bounded

EXAMPLES = max(20, int(os.environ.get("HARNESS_FUZZ_EXAMPLES", "300")) // 3)
GARBAGE = ["", "{", "null", "[]", "\x00", '{"lock_hash": 5}', '{"trial_id": null}', "9" * 400, '{"a":' * 50, "ÿ"]
VALUES: list[object] = [None, 0, -1, "", "x", [], {}, 1e308, True, "../../etc", "a" * 1000]
KINDS = ["truncate", "garbage line", "field", "flip", "delete", "directory", "fifo", "/dev/zero"]


@pytest.fixture(scope="module")
def sources() -> Iterator[list[Path]]:
    """An experiment, a family and a matrix, each reported once (so every derived file is there to damage)."""
    base = Path(tempfile.mkdtemp(prefix="fuzz-results-"))
    tops = [
        write_experiment(base / "e", {"t1": ("PF", "PP"), "t2": ("FF", "PP"), "t3": ("PP", "PP")}),
        write_family(base / "f", {"weak": spec(WEAK), "strong": spec(STRONG)}),
        write_matrix(base / "m", {"sonnet": {"t1": ("F", "P")}, "claude-opus-4-1": {"t1": ("F", "F")}}),
    ]
    for top in tops:
        assert run(["report", str(top)])[0] in (0, 1, 2), "the undamaged directories report"
    yield tops
    shutil.rmtree(base, ignore_errors=True)


def run(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with bounded(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(args, env={})
    return code, err.getvalue()


def damage(path: Path, kind: str, at: float, value: object) -> None:
    data = path.read_bytes()
    cut = int(at * len(data))
    if kind == "truncate":
        path.write_bytes(data[:cut])
    elif kind == "garbage line":
        lines = data.split(b"\n")
        lines.insert(int(at * len(lines)), str(value).encode())
        path.write_bytes(b"\n".join(lines))
    elif kind == "field":
        with contextlib.suppress(ValueError):
            doc = json.loads(data)
            if isinstance(doc, dict) and doc:
                doc[sorted(doc)[cut % len(doc)]] = value
                path.write_text(json.dumps(doc))
    elif kind == "flip" and data:
        i = min(cut, len(data) - 1)
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])
    elif kind == "delete":
        path.unlink()
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif kind == "/dev/zero":
        path.unlink()
        path.symlink_to("/dev/zero")


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    which=st.integers(0, 2),
    damages=st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(KINDS), st.floats(0, 1), st.sampled_from(GARBAGE + VALUES)),
        min_size=1,
        max_size=3,
    ),
)
def test_reading_a_damaged_results_directory_never_crashes_or_hangs(
    sources: list[Path], which: int, damages: list[tuple[int, str, float, object]]
) -> None:
    src = sources[which]
    work = Path(tempfile.mkdtemp(prefix="fuzz-results-example-"))
    try:
        shutil.copytree(src.parent, work / "copy", symlinks=True)
        top = work / "copy" / src.name
        for index, kind, at, value in damages:
            files = sorted(p for p in top.rglob("*") if p.is_file() and not p.is_symlink())
            if files:
                damage(files[index % len(files)], kind, at, value)
        for args in (["report", str(top)], ["gate", str(top)], ["history", "tidy", "--results", str(top)],
                     ["merge", str(work / "merged"), str(top)]):  # fmt: skip
            code, err = run(args)
            assert "Traceback" not in err and "internal error" not in err, f"{args[0]}: {err}"
            assert code in (0, 1, 2, 3, 4), f"{args[0]} exit {code}: {err}"
            if code in (3, 4) and args[0] != "gate":  # gate's 3 is also "no verdict", said on stdout
                assert err.startswith("skilltrial: error: "), f"{args[0]}: {err}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize(("name", "command"), [("experiment.json", "gate"), ("results.jsonl", "merge")])
def test_positive_control_a_link_to_dev_zero_is_refused_by_name(
    sources: list[Path], tmp_path: Path, name: str, command: str
) -> None:
    """Before the regular-file check these reads did not end (the address-space cap stops them with a
    MemoryError, an internal error); now the file is named."""
    shutil.copytree(sources[0].parent, tmp_path / "copy")
    damaged = tmp_path / "copy" / sources[0].name / name
    damage(damaged, "/dev/zero", 0, None)
    args = (
        [command, str(damaged.parent)] if command == "gate" else [command, str(tmp_path / "out"), str(damaged.parent)]
    )
    code, err = run(args)
    assert code in (3, 4) and f"{damaged}" in err and "not a regular file" in err, err
