"""Property-based fuzz of `skilltrial lock` over tasks.json and preregistration.yaml (issue 13).

For every generated pair of files, ``skilltrial lock`` (in-process, through ``harness.cli.main``) either
succeeds, and then the lock verifies and the inputs are byte-for-byte as written, or exits 4 with one
message naming the file; never a traceback, a hang (an alarm backstop), an alias blow-up (the address
space is capped while it runs) or a write anywhere but the lock file beside the preregistration.

Inputs are made two ways: structured (a valid study, with one skill, versions (arms), a model matrix or a
group-sequential decision, with fields replaced by hostile values, written in
one of several YAML/JSON styles) and textual (a valid file with YAML/JSON syntax spliced in).
The default run is short; ``HARNESS_FUZZ_EXAMPLES=5000`` runs more.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import resource
import signal
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness import cli
from harness.study.config import load_study, lock_path
from harness.study.lock import verify_lock
from tests.factories import DEFAULT_TASKS, init_repo, run_git

EXAMPLES = int(os.environ.get("HARNESS_FUZZ_EXAMPLES", "300"))
HANG_BACKSTOP_S = 60  # a hang fails the example instead of blocking the suite; not a timing assertion
ADDRESS_SPACE_HEADROOM = 1 << 30  # an alias bomb needs gigabytes; a lock of a small study needs megabytes

PREREG: dict[str, Any] = {
    "skill": "tidy",
    "skill_ref": "skill",
    "tasks": "tasks.json",
    "target_tasks": "all",
    "expected_effect": "fewer failed verifies",
    "side_effects_to_watch": ["cost"],
    "execution": {
        "runs_per_arm": 2,
        "model": "sonnet",
        "judge_model": "haiku",
        "repo": "REPO",
        "base_ref": "HEAD",
        "budgets": {"per_trial_usd": 0.5, "timeout_s": 300},
        "resources": {"memory": "2g", "cpus": 1, "tmpfs_size": "512m"},
    },
    "decision": {"rule": "point", "cost_increase_max": 0.5},
}
TASKS: dict[str, Any] = {"tasks": [dict(t, protected_paths=["tests"], timeout_s=60) for t in DEFAULT_TASKS]}


def _variant(**changes: Any) -> dict[str, Any]:
    prereg = copy.deepcopy(PREREG)
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = prereg
        for part in parents:
            node = node[part]
        if value is None:
            node.pop(key)
        else:
            node[key] = value
    return prereg


BASES: dict[str, dict[str, Any]] = {
    "one skill": PREREG,
    "versions (arms)": _variant(skill_ref=None, arms={"baseline": "bare", "versions": {"v1": {"path": "skill"},
                                                                                      "v2": {"path": "skill2"}}}),
    "model matrix": _variant(execution__model=None, execution__models=["sonnet", "opus"]),
    "group-sequential": _variant(decision__rule="interval", decision__cost_increase_max=None,
                                 decision__early_stop="curtail", decision__sequential={"looks": [1, 2]}),
}  # fmt: skip
"""The valid studies the structured fuzz starts from (each locks: a positive control below)."""

HOSTILE_TEXT = [
    "", " ", "\t", "t1\n", "t1 ", "tidy\n", "\x00", "a\x00b", "\ud800", "x\udfff", ".", "./", "..", "../x", "/",
    "/dev/zero", "/dev/null", "fifo", "loop", "skill", "tasks.json", "preregistration.yaml", "nope",
    "-x", "--output=/tmp/x", "HEAD~1", "HEAD\n", "1k", "99999999999999g", "0", "2G", "64m", "1t",
    "Bash(git *)", "Bash\n", "rm -rf /", "all", "point", "TODO", "*", "&a", "!!python/object:os.system",
    "{{probe:x}}", "x" * 300, "é", "\u202e", "\r\n", "\x7f",
]  # fmt: skip


def deep(depth: int, leaf: object = 0) -> object:
    out: object = leaf
    for i in range(depth):
        out = [out] if i % 2 else {"k": out}
    return out


def hostile_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(10**60), max_value=10**60),
        st.sampled_from([0, -1, 1, 2**63, 10**40, 10**4000]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(HOSTILE_TEXT),
        st.text(max_size=20),
        st.text(st.characters(codec=None, categories=None), max_size=8),  # surrogates included
    )
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=4),
        st.dictionaries(st.sampled_from(["id", "a", "rule", "memory", "", "\x00"]), scalars, max_size=3),
        st.integers(min_value=1, max_value=200).map(deep),
    )


FIELD_PATHS: Sequence[tuple[str, tuple[str | int, ...]]] = (
    [("prereg", (k,)) for k in PREREG]
    + [("prereg", ("execution", k)) for k in PREREG["execution"]]
    + [("prereg", ("execution", "budgets", k)) for k in ("per_trial_usd", "total_usd", "judge_usd", "timeout_s")]
    + [("prereg", ("execution", "resources", k)) for k in ("memory", "cpus", "pids", "max_file_size", "nofile")]
    + [("prereg", ("decision", k)) for k in ("rule", "confidence", "pass_rule", "max_missing_share")]
    + [("prereg", ("lock",)), ("prereg", ("unknown_field",)), ("prereg", ("execution", "seed"))]
    + [("tasks", ("tasks", 0, k)) for k in ("id", "prompt", "verify_cmd", "protected_paths", "timeout_s")]
    + [("prereg", (k,)) for k in ("arms", "library", "selection", "split", "judge", "on_rejection", "shelf")]
    + [("prereg", ("arms", k)) for k in ("baseline", "versions")]
    + [("prereg", ("arms", "versions", k)) for k in ("v1", "v2", "bare")]
    + [("prereg", ("arms", "versions", "v1", k)) for k in ("path", "ref", "delivery")]
    + [("prereg", ("execution", k)) for k in ("agent", "models", "delivery", "allowed_tools", "max_infra_retries")]
    + [("prereg", ("execution", "models", 1))]
    + [("prereg", ("decision", k)) for k in ("early_stop", "futility_stop", "sequential", "models_rule")]
    + [("prereg", ("decision", "sequential", k)) for k in ("looks", "spending")]
    + [("prereg", ("library", k)) for k in ("path", "masks", "top_k", "components")]
    + [("tasks", ("tasks", 0, k)) for k in ("split", "pass_criteria")]
    + [("tasks", ("tasks", 1, "id")), ("tasks", ("tasks", 0, "extra")), ("tasks", ("tasks",))]
)


def put(tree: Any, path: tuple[str | int, ...], value: Any) -> None:
    """Set ``tree[path] = value``, unless an earlier mutation replaced a parent with something else."""
    node = tree
    for part in path[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return
    key = path[-1]
    if isinstance(node, list):
        if isinstance(key, int) and key < len(node):
            node[key] = value
    elif isinstance(node, dict):
        node[key] = value


def dump_yaml(data: Any, style: str) -> str:
    if style == "json":
        return json.dumps(data, indent=2)
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=style == "flow", allow_unicode=True)
    if style == "document":
        return "---\n" + text + "...\n"
    if style == "keep":
        return text + "side_effects_note: |+\n  kept\n\n\n".replace("side_effects_note", "expected_effect")
    return text


@st.composite
def structured(draw: st.DrawFn) -> tuple[str, str]:
    prereg, tasks = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))]), copy.deepcopy(TASKS)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        which, path = draw(st.sampled_from(FIELD_PATHS))
        put(prereg if which == "prereg" else tasks, path, draw(hostile_values()))
    style = draw(st.sampled_from(["block", "flow", "json", "document", "keep"]))
    if style == "keep":
        prereg.pop("expected_effect", None)
    try:
        prereg_text = dump_yaml(prereg, style)
    except (yaml.YAMLError, UnicodeError, ValueError):
        prereg_text = json.dumps(prereg, default=str)
    tasks_text = json.dumps(tasks, ensure_ascii=draw(st.booleans()))
    return prereg_text, tasks_text


SPLICES = [
    "[", "]", "{", "}", ",", ":", ": ", "- ", "&a ", "*a", "&a [1]\nx: *a\n", "<<: {a: 1}\n", "!!python/name:os.system",
    "? ", "|", "|+\n", ">-\n", "---\n", "...\n", "%YAML 1.1\n", "#", "\t", "\n", "\n  ", '"', "'", "\\", "\\u",
    "\\ud800", "\\x00", "\x00", "\ufeff", "NaN", "Infinity", "-Infinity", "1e999", "9" * 5000, "true", "null",
    ".inf", ".nan", "0x1F", "0o17", "1_000", "2001-12-14", "~", "skill: dup\n", '"tasks": [], ', '"id": "x", ',
    "[" * 300, "{" * 300, "- " * 100, "lock:\n  sha256: x\n",
]  # fmt: skip


@st.composite
def spliced(draw: st.DrawFn, text: str) -> str:
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        length = draw(st.integers(min_value=0, max_value=20))
        piece = draw(st.one_of(st.sampled_from(SPLICES), st.text(max_size=5)))
        if action == "insert":
            text = text[:at] + piece + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + length :]
        elif action == "replace":
            text = text[:at] + piece + text[at + length :]
        else:
            text = text[:at] + text[at : at + length] * 2 + text[at + length :]
    return text


@st.composite
def textual(draw: st.DrawFn) -> tuple[str, str]:
    prereg_text = dump_yaml(PREREG, draw(st.sampled_from(["block", "flow", "json", "document"])))
    tasks_text = json.dumps(TASKS, indent=draw(st.sampled_from([None, 2])))
    target = draw(st.sampled_from(["prereg", "tasks", "both"]))
    if target in ("prereg", "both"):
        prereg_text = draw(spliced(prereg_text))
    if target in ("tasks", "both"):
        tasks_text = draw(spliced(tasks_text))
    return prereg_text, tasks_text


# ------------------------------------------------------------------------------ the runner


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(a base directory for every example's study, one git repository they all lock against)."""
    base = tmp_path_factory.mktemp("fuzz")
    repo = base / "repo"
    head = init_repo(repo)
    studies = base / "studies"
    studies.mkdir()
    yield studies, repo
    assert run_git(repo, "rev-parse", "HEAD").decode().strip() == head
    assert run_git(repo, "status", "--porcelain", "--ignored") == b"", "the repository was written to"


def _hang(signum: int, frame: FrameType | None) -> None:
    raise AssertionError(f"skilltrial lock still running after {HANG_BACKSTOP_S}s: it hangs")


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def bounded() -> Iterator[None]:
    """An alarm against hangs and a cap on the address space against blow-ups, undone afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_size() + ADDRESS_SPACE_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    old_alarm = signal.signal(signal.SIGALRM, _hang)
    old_term = signal.getsignal(signal.SIGTERM)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    signal.alarm(HANG_BACKSTOP_S)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, old_alarm)
        signal.signal(signal.SIGTERM, old_term)


def lock_cli(prereg: Path) -> tuple[int, str]:
    err = io.StringIO()
    with bounded(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["lock", str(prereg)], env={})
    return code, err.getvalue()


def listing(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        st_ = os.lstat(p)
        key = str(p.relative_to(root))
        if stat.S_ISREG(st_.st_mode):
            out[key] = p.read_bytes()
        elif stat.S_ISLNK(st_.st_mode):
            out[key] = "-> " + os.readlink(p)
        else:
            out[key] = f"mode {stat.S_IFMT(st_.st_mode):o}"
    return out


def write_study(root: Path, repo: Path, prereg_text: str, tasks_text: str) -> Path:
    (root / "skill").mkdir()
    (root / "skill" / "SKILL.md").write_text("# Tidy\nAlways tidy up.\n")
    (root / "skill2").mkdir()  # a second version, for the studies with arms
    (root / "skill2" / "SKILL.md").write_text("# Tidy\nAlways tidy up, twice.\n")
    os.mkfifo(root / "fifo")
    (root / "loop").symlink_to("loop")
    prereg = root / "preregistration.yaml"
    prereg.write_bytes(prereg_text.replace("REPO", str(repo)).encode("utf-8", "surrogatepass"))
    (root / "tasks.json").write_bytes(tasks_text.encode("utf-8", "surrogatepass"))
    return prereg


def check_lock(studies: Path, repo: Path, prereg_text: str, tasks_text: str) -> None:
    root = Path(tempfile.mkdtemp(dir=studies))
    prereg = write_study(root, repo, prereg_text, tasks_text)
    others = sorted(p.name for p in studies.iterdir())
    before = listing(root)

    code, err = lock_cli(prereg)

    assert "Traceback" not in err and "internal error" not in err, err
    assert code in (0, 4), f"exit {code}: {err}"
    event("locked" if code == 0 else "refused")
    if os.environ.get("HARNESS_FUZZ_LOG"):
        with open(os.environ["HARNESS_FUZZ_LOG"], "a", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(f"{code} {err.strip()!r}\n")
    after = listing(root)
    written = {k for k in after if before.get(k) != after[k]} | {k for k in before if k not in after}
    if code == 4:
        assert err.startswith("skilltrial: error: "), err
        assert len(err.strip().splitlines()) <= 2, err
        assert str(root) in err or "/dev/" in err or str(repo) in err, f"no file named: {err}"
        assert "field '" in err or "malformed" in err, f"no field or place named: {err}"
        assert written == set(), f"a refused input wrote {written}"
    else:  # success prints nothing on stderr but warnings (e.g. a model the price table does not know)
        assert all(line.startswith("warning: ") for line in err.splitlines()), err
        assert written == {lock_path(prereg).name}, f"lock wrote {written}"
        verify_lock(load_study(prereg))
        code, err = lock_cli(prereg)  # a locked study can be locked again, and still verifies
        assert code == 0, err
        verify_lock(load_study(prereg))
    assert sorted(p.name for p in studies.iterdir()) == others, "something was written beside the study"


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(files=st.one_of(structured(), textual()))
def test_lock_never_crashes_hangs_or_writes_outside(shared: tuple[Path, Path], files: tuple[str, str]) -> None:
    studies, repo = shared
    check_lock(studies, repo, *files)


@pytest.mark.parametrize("base", sorted(BASES))
def test_positive_control_the_unmutated_study_locks(shared: tuple[Path, Path], base: str) -> None:
    """The fuzz starts from studies that lock: otherwise every example would only test refusals."""
    studies, repo = shared
    root = Path(tempfile.mkdtemp(dir=studies))
    prereg = write_study(root, repo, dump_yaml(BASES[base], "block"), json.dumps(TASKS))
    code, err = lock_cli(prereg)
    assert code == 0, err
    verify_lock(load_study(prereg))


def test_positive_control_the_checks_see_a_crash(shared: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """If lock raised something that is not a HarnessError, the property would fail."""
    studies, repo = shared

    def boom(*args: object, **kwargs: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("harness.study.lock.load_study", boom)
    with pytest.raises(AssertionError, match="Traceback"):
        check_lock(studies, repo, dump_yaml(PREREG, "block"), json.dumps(TASKS))
