"""The import layers the ``harness/*/__init__.py`` docstrings state, held over every import.

Every module of the package is parsed with :mod:`ast`; every ``import`` and ``from ... import`` counts,
top-level or lazy (inside a function, a ``try``, an ``if TYPE_CHECKING``): a lazy import that breaks a
layer only hides the dependency from the reader. ``from harness.pkg import name`` counts as an import of
the submodule ``harness.pkg.name`` when there is one, else of the package itself.

The rules are written by package and role, not by file name, so they hold as modules are split or added
inside a package; a new top-level module or subpackage fails :func:`test_every_module_has_a_layer` until it
is given its place here. The layers, bottom up (each may import what is below it, as narrowed in
:data:`MAY_IMPORT`)::

    foundation (errors, fmt, retry, redact, records)  <  host  <  study  <  plan
      <  results, analysis  <  sandbox  <  trial  <  reporting  <  experiment  <  cli, demo, docs, schemas, completion

plus: analysis is pure (no I/O, no processes, no sockets, no rendering); sandbox sees nothing above it;
only ``python -m harness`` imports the CLI; renderers do not import each other (junit may reuse the
terminal text) nor the reporting package itself; sidecars are standalone, standard-library programs, of which
the controller imports only the pure functions :data:`SIDECAR_FUNCTIONS` names and the gateway's log format
(:data:`SIDECAR_FORMAT`: the typed events the gateway writes and the controller reads).

What breaks a rule is listed in :data:`KNOWN_VIOLATIONS` and :data:`KNOWN_CYCLES`, each with the move
that would fix it (both are empty: keep them so, or give an entry a reason a reviewer accepts). The test fails on any violation not listed there *and* on any listed one that no longer
happens, so the lists only shrink: when a fix lands, delete its entry.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "harness"

# ----------------------------------------------------------------------------- the rules

FOUNDATION = frozenset(
    {"harness", "harness.errors", "harness.fmt", "harness.retry", "harness.redact", "harness.records"}
)
"""The floor: exceptions, number formatting, the retry policy, redaction, the record schema (and the package's
own ``__init__``). These import nothing of the harness but each other."""

TOP = frozenset({
    "harness.cli", "harness.demo", "harness.__main__",
    "harness.docs", "harness.schemas", "harness.completion",  # the installed tool's pages, input schemas, completion
})  # fmt: skip

BELOW_PLAN = frozenset({"foundation", "host", "study", "plan"})
"""What every layer from results up may take as given ("the foundation" of the docstrings)."""

MAY_IMPORT: Mapping[str, frozenset[str]] = {
    "foundation": frozenset(),
    "host": frozenset({"harness.errors"}),  # host's docstring: only errors (it is the floor the rest stands on)
    "study": frozenset({"harness.errors", "harness.records", "host"}),
    "plan": frozenset({"foundation", "host", "study"}),  # pure planning over the study's tasks
    "results": BELOW_PLAN,
    # pure: records in, verdicts out; of results only the pure reductions over attempts
    "analysis": frozenset({"harness.errors", "harness.fmt", "harness.records", "study", "harness.results.attempts"}),
    "sandbox": frozenset({"harness.errors", "harness.retry", "harness.records", "host", "study"}),
    "trial": BELOW_PLAN | {"results", "sandbox"},
    "reporting": BELOW_PLAN | {"results", "analysis"},
    "experiment": BELOW_PLAN | {"results", "analysis", "sandbox", "trial", "reporting"},
    "top": BELOW_PLAN | {"results", "analysis", "sandbox", "trial", "reporting", "experiment", "top"},
    "sidecars": frozenset(),  # see test_sidecars_are_standalone_standard_library_programs
}
"""Layer -> the layers (or single modules, by dotted name) it may import besides itself."""

IMPURE = frozenset({
    "os", "io", "pathlib", "shutil", "tempfile", "glob", "fcntl", "subprocess", "socket", "ssl", "select",
    "selectors", "signal", "threading", "multiprocessing", "concurrent", "asyncio", "http", "urllib", "sqlite3",
    "docker", "requests", "urllib3", "rich",
})  # fmt: skip
"""What analysis must not import: files, processes, sockets, threads, the engine, the terminal."""
IMPURE_CALLS = frozenset({"open", "print", "input"})

RENDERERS = frozenset({"text", "markdown", "html", "junit", "decision_json"})
"""The outputs the reporting docstring names, one module each: they share ``model``/``escape``/``fmt``, never
each other's code. Modules of reporting with other names (the model, the shared sections, gate, history,
the ledger) are not renderers."""
RENDERER_REUSE = frozenset({("junit", "text")})  # JUnit's failure messages are the terminal's lines

KNOWN_VIOLATIONS: Mapping[tuple[str, str], str] = {
    # (importing module or package, imported module or package): why it is wrong and the move that fixes it
}  # fmt: skip

SIDECAR_FUNCTIONS: Mapping[tuple[str, str], frozenset[str]] = {
    # the provenance's upstream_proxy must be the gateway's own NO_PROXY decision: one rule, not two copies
    ("harness.experiment.upstream", "harness.sidecars.upstream_link"): frozenset({"bypass_proxy"}),
}
"""(controller module, sidecar module) -> the names it may import from it: pure functions the gateway
itself applies, so the controller and the container decide alike. Nothing else of the sidecars is
imported but :data:`SIDECAR_FORMAT` (the controller reads ``collect.sh`` as a package resource)."""

SIDECAR_FORMAT = "harness.sidecars.gatewaylog"
"""The gateway's log, one typed event model for the writer (the gateway) and its readers (any module of the
controller): standard-library dataclasses and their parser, no I/O. The second edge into the sidecars."""

KNOWN_CYCLES: Mapping[frozenset[str], str] = {
    # frozenset of the modules of one cycle: why it is there and the move that breaks it
}  # fmt: skip

# ----------------------------------------------------------------------------- the import graph


@dataclass(frozen=True)
class Import:
    source: str
    """The importing module."""
    target: str
    """The imported harness module or package, or the top-level name of a foreign module."""
    line: int
    lazy: bool
    """Not at the module's top level (inside a function, ``try``, ``if``...)."""

    @property
    def internal(self) -> bool:
        return self.target == "harness" or self.target.startswith("harness.")

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}{' (lazily)' if self.lazy else ''}"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules(root: Path = HARNESS) -> Mapping[str, Path]:
    """Dotted name -> file of every module and package under ``root``."""
    return {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _nearest_module(name: str, known: Mapping[str, Path]) -> str:
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(module: str, source: str, known: Mapping[str, Path], *, is_package: bool = False) -> Iterator[Import]:
    """Every import in ``source`` (the text of ``module``), resolved against the ``known`` modules."""
    tree = ast.parse(source)
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for name in names:
            internal = name == "harness" or name.startswith("harness.")
            target = _nearest_module(name, known) if internal else name.split(".")[0]
            yield Import(module, target, node.lineno, id(node) not in top)


@cache
def graph() -> tuple[Import, ...]:
    known = modules()
    return tuple(
        imp
        for name, path in known.items()
        for imp in imports_of(name, path.read_text(), known, is_package=path.name == "__init__.py")
    )


def layer(module: str) -> str:
    """The layer a module belongs to: its subpackage, or the role of a top-level module."""
    if module in FOUNDATION:
        return "foundation"
    if module in TOP:
        return "top"
    if module == "harness.plan":
        return "plan"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in MAY_IMPORT and (HARNESS / parts[1]).is_dir():
        return parts[1]
    raise LookupError(f"{module} has no layer: give it one in tests/unit/test_layers.py (FOUNDATION, TOP or a package)")


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def allowed(imp: Import) -> bool:
    """The import goes down the layers (or stays inside its own)."""
    source, target = layer(imp.source), layer(imp.target)
    if source == target or (imp.source, imp.target) in SIDECAR_FUNCTIONS or imp.target == SIDECAR_FORMAT:
        return True  # the names such an import takes: test_the_controller_imports_only_pure_sidecar_functions
    return any(
        _under(imp.target, rule) if rule.startswith("harness") else rule == target for rule in MAY_IMPORT[source]
    )


def _known(imp: Import) -> tuple[str, str] | None:
    return next((k for k in KNOWN_VIOLATIONS if _under(imp.source, k[0]) and _under(imp.target, k[1])), None)


def _cycles(edges: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _report(title: str, lines: Iterable[str]) -> str:
    return title + "\n  " + "\n  ".join(sorted(lines))


# ----------------------------------------------------------------------------- the tests


def test_the_walker_sees_lazy_imports_and_submodules() -> None:
    """Positive control: a walker that saw nothing would pass every rule."""
    known = {name: Path() for name in ("harness", "harness.trial", "harness.trial.claude", "harness.errors")}
    source = (
        "from harness.trial import claude, run_trial\n"
        "import harness.errors\n"
        "def f():\n"
        "    from . import claude as c\n"
        "    import json\n"
    )
    found = {(i.target, i.lazy) for i in imports_of("harness.trial.gateway", source, known)}
    assert found == {
        ("harness.trial.claude", False),  # a submodule named in from-import
        ("harness.trial", False),  # a name of the package itself
        ("harness.errors", False),
        ("harness.trial.claude", True),  # relative and inside a function
        ("json", True),
    }
    assert len(graph()) > 300 and any(i.lazy and i.internal for i in graph())


def test_every_module_has_a_layer() -> None:
    missing = []
    for name in modules():
        try:
            layer(name)
        except LookupError as e:
            missing.append(str(e))
    assert not missing, "\n".join(missing)


def test_imports_go_down_the_layers() -> None:
    bad = [imp for imp in graph() if imp.internal and not allowed(imp)]
    new = [f"{imp}  [{layer(imp.source)} may not import {layer(imp.target)}]" for imp in bad if _known(imp) is None]
    assert not new, _report("imports that break the layers (move the code, or see KNOWN_VIOLATIONS):", new)
    used = {_known(imp) for imp in bad}
    stale = [f"{k[0]} -> {k[1]}" for k in KNOWN_VIOLATIONS if k not in used]
    assert not stale, _report("fixed, so delete from KNOWN_VIOLATIONS:", stale)


def test_nothing_but_the_entry_point_imports_the_cli() -> None:
    bad = [str(i) for i in graph() if _under(i.target, "harness.cli") and i.source != "harness.__main__"]
    assert not bad, _report("only python -m harness imports the CLI (it prints and exits):", bad)


def test_analysis_is_pure() -> None:
    bad = [str(i) for i in graph() if layer(i.source) == "analysis" and not i.internal and i.target in IMPURE]
    for name, path in modules().items():
        if layer(name) == "analysis":
            bad += [
                f"{name}:{node.lineno} calls {node.func.id}()"
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IMPURE_CALLS
            ]
    assert not bad, _report("analysis does no I/O and no rendering:", bad)


def test_sidecars_are_standalone_standard_library_programs() -> None:
    """They run in the sidecar image from a flat folder: siblings by their bare name (or, on the host, as
    ``harness.sidecars.*``), otherwise the standard library only; nothing of the controller."""
    siblings = {name.rsplit(".", 1)[-1] for name in modules() if layer(name) == "sidecars"}
    bad = []
    for imp in graph():
        if layer(imp.source) != "sidecars":
            continue
        if imp.internal and not _under(imp.target, "harness.sidecars"):
            bad.append(f"{imp}  [controller code]")
        elif not imp.internal and imp.target not in sys.stdlib_module_names and imp.target not in siblings:
            bad.append(f"{imp}  [not in the standard library]")
    assert not bad, _report("sidecars import the standard library and each other only:", bad)


def test_the_controller_imports_only_pure_sidecar_functions() -> None:
    """The allowed edges from the controller into the sidecars: the names listed, by name, and the log format."""
    bad = []
    for name, path in modules().items():
        if layer(name) == "sidecars":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                bad += [
                    f"{name}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if _under(a.name, "harness.sidecars") and a.name != SIDECAR_FORMAT
                ]
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module
                and _under(node.module, "harness.sidecars")
                and node.module != SIDECAR_FORMAT
            ):
                allowed_names = SIDECAR_FUNCTIONS.get((name, node.module), frozenset())
                bad += [
                    f"{name}:{node.lineno} imports {a.name} from {node.module}"
                    for a in node.names
                    if a.name not in allowed_names and f"{node.module}.{a.name}" != SIDECAR_FORMAT
                ]
    assert not bad, _report("the controller imports no sidecar code but SIDECAR_FUNCTIONS and SIDECAR_FORMAT:", bad)
    assert all(SIDECAR_FUNCTIONS), "each allowed edge names its functions"
    impure = [str(i) for i in graph() if i.source == SIDECAR_FORMAT and (i.internal or i.target in IMPURE)]
    assert not impure, _report("the log format is data and its parser: no I/O, nothing of the harness:", impure)
    assert any(i.target == SIDECAR_FORMAT and layer(i.source) != "sidecars" for i in graph()), "the edge is used"


def test_renderers_import_neither_each_other_nor_the_reporting_package() -> None:
    bad = []
    for imp in graph():
        if layer(imp.source) != "reporting" or not imp.internal:
            continue
        if imp.target == "harness.reporting" and imp.source != "harness.reporting":
            bad.append(f"{imp}  [the package's write_reports imports the renderers, not the reverse]")
        src, dst = imp.source.rsplit(".", 1)[-1], imp.target.rsplit(".", 1)[-1]
        if src in RENDERERS and dst in RENDERERS and src != dst and (src, dst) not in RENDERER_REUSE:
            bad.append(f"{imp}  [renderers share the model, not each other]")
    assert not bad, _report("reporting:", bad)


def test_no_import_cycle_inside_a_package() -> None:
    """Across packages the layers already rule cycles out; inside one, lazy imports count too (a lazy
    import that closes a cycle only hides it)."""
    edges: dict[str, set[str]] = {}
    for imp in graph():
        if imp.internal and imp.target != imp.source and layer(imp.source) == layer(imp.target):
            edges.setdefault(imp.source, set()).add(imp.target)
    found = set(_cycles(edges))
    new = [" <-> ".join(sorted(c)) for c in found - set(KNOWN_CYCLES)]
    assert not new, _report("import cycles (see KNOWN_CYCLES):", new)
    stale = [" <-> ".join(sorted(c)) for c in set(KNOWN_CYCLES) - found]
    assert not stale, _report("broken, so delete from KNOWN_CYCLES:", stale)
