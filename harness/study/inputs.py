"""Reading the user's input files safely: bounded, regular files, strict parsers.

Every input (``preregistration.yaml``, ``tasks.json``, a scenario file, a lock
file) goes through here before pydantic sees it, so that no input can crash,
hang or exhaust the controller:

* only regular files are read (a FIFO would block forever, ``/dev/zero`` never
  ends, a directory is not a file), and at most :data:`MAX_INPUT_BYTES`;
* YAML aliases are refused (an alias bomb expands a few hundred KB into
  gigabytes), as are duplicate keys in YAML and JSON (the last would silently
  win), nesting deeper than :data:`MAX_DEPTH`, integers longer than
  :data:`MAX_INT_DIGITS`, ``NaN``/``Infinity``;
* every string and key is checked for NUL bytes and lone surrogates (which
  break paths, git and the UTF-8 encoding of everything written later).

Each problem is one :class:`~harness.errors.ConfigError` naming the file (and
the field when there is one).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

from harness.errors import ConfigError

MAX_INPUT_BYTES = 4 << 20
"""Largest input file read (preregistration, tasks, scenario, lock): far above any real one."""
MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted (real inputs nest four or five levels)."""
MAX_INT_DIGITS = 40
MAX_NODES = 1_000_000
"""Most values (counting every use of a YAML alias) a document may expand to."""
MAX_TEXT = 64 << 20
"""Most characters of text (counting every use of a YAML alias) a document may expand to."""


def read_input(path: Path, *, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes, or a ConfigError naming it.

    Opened with ``O_NONBLOCK`` so a FIFO cannot block, then checked with ``fstat``
    before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    except ValueError:  # an embedded NUL in the path
        raise ConfigError(_printable(path), "the path contains a NUL byte") from None
    except OSError as e:
        raise ConfigError(path, f"cannot be read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(path, "is a directory, expected a file")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(path, f"is not a regular file (it is a {_kind(st.st_mode)})")
        if st.st_size > limit:
            raise ConfigError(path, f"is {st.st_size} bytes, more than the {limit} an input file may have")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ConfigError(path, f"cannot be read: {e.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:  # grew while being read
        raise ConfigError(path, f"is more than the {limit} bytes an input file may have")
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _printable(path: object) -> str:
    return repr(str(path))[1:-1]


# ---------------------------------------------------------------------------------- YAML


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases, duplicate keys or unbounded nesting."""

    _depth = 0
    allow_aliases = False

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if not self.allow_aliases and self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise ComposerError(
                None, None, "aliases (*name) are not allowed in this file; write the value out", event.start_mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ConstructorError(None, None, "merge keys (<<) are not allowed", key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise ConstructorError(None, None, "a mapping key must be a plain value", key_node.start_mark) from None
            if duplicate:
                raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        value = str(node.value).replace("_", "").lstrip("+-")
        if len(value) > MAX_INT_DIGITS:
            raise ConstructorError(None, None, f"an integer of more than {MAX_INT_DIGITS} digits", node.start_mark)
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


class _AliasLoader(_StrictLoader):
    """:class:`_StrictLoader` that accepts aliases; :func:`check_tree` bounds what they expand to."""

    allow_aliases = True


def load_yaml(path: Path, text: str, *, aliases: bool = False) -> Any:
    """The YAML document in ``text`` (see :class:`_StrictLoader`), checked by :func:`check_tree`.

    ``aliases``: accept ``*name`` references (scenario files, which tests write with
    ``yaml.safe_dump`` of shared objects); what they expand to is bounded by :func:`check_tree`.
    Preregistrations and lock files never take them."""
    try:
        data = yaml.load(text, Loader=_AliasLoader if aliases else _StrictLoader)  # SafeLoader subclasses
    except yaml.reader.ReaderError as e:
        char = e.character if isinstance(e.character, int) else ord(str(e.character)[:1] or "\0")
        line = text.count("\n", 0, e.position) + 1
        raise ConfigError(
            path, f"malformed YAML at line {line}: the character #x{char:04x} is not allowed in YAML"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(path, f"malformed YAML{where}: {problem}") from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as e:
        raise ConfigError(path, f"malformed YAML: {type(e).__name__}: {str(e)[:200]}") from None
    check_tree(path, data)
    return data


# ---------------------------------------------------------------------------------- JSON


class _JSONProblem(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JSONProblem(f"duplicate key {key!r}")
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _JSONProblem(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _JSONProblem(f"the number {text[:40]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise _JSONProblem(f"{name} is not a number JSON allows")


def load_json(path: Path, text: str) -> Any:
    """The JSON document in ``text``: strict (no duplicate keys, NaN, huge numbers), checked by :func:`check_tree`."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise ConfigError(path, f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except _JSONProblem as e:
        raise ConfigError(path, f"malformed JSON: {e}") from None
    except RecursionError:
        raise ConfigError(path, f"malformed JSON: nested more than {MAX_DEPTH} levels deep") from None
    check_tree(path, data)
    return data


# ------------------------------------------------------------------------------ the tree


def _where(loc: tuple[object, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + _printable(part)
    return out or "(top level)"


def _bad_text(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL byte"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode text)"
    return None


def check_tree(path: Path, data: object) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH`, documents expanding beyond :data:`MAX_NODES` values
    or :data:`MAX_TEXT` characters (every use of an alias counted), and strings or keys with a NUL or
    a lone surrogate, naming the field. Iterative, so it cannot itself run out of stack."""
    stack: list[tuple[object, tuple[object, ...]]] = [(data, ())]
    nodes = chars = 0
    while stack:
        node, loc = stack.pop()
        nodes += 1
        if len(loc) > MAX_DEPTH:
            raise ConfigError(path, f"nested more than {MAX_DEPTH} levels deep", field=_where(loc[:MAX_DEPTH]))
        if nodes > MAX_NODES or chars > MAX_TEXT:
            raise ConfigError(
                path, f"expands to more than {MAX_NODES} values or {MAX_TEXT} characters (repeated aliases?)"
            )
        if isinstance(node, str):
            chars += len(node)
            problem = _bad_text(node)
            if problem:
                raise ConfigError(path, f"the value {problem}", field=_where(loc))
        elif isinstance(node, Mapping):
            for key, value in node.items():
                if isinstance(key, str) and (problem := _bad_text(key)):
                    raise ConfigError(path, f"a key {problem}", field=_where(loc))
                stack.append((value, (*loc, key)))
        elif isinstance(node, list | tuple):
            stack.extend((value, (*loc, i)) for i, value in enumerate(node))
