"""``skilltrial completion bash|zsh|fish``: a shell completion script made from the command's own parser.

shtab writes the script from the argparse parser, so every subcommand, option and choice the CLI has is
completed, with nothing to keep in step by hand. This module only marks which arguments name files or
folders (the parser says ``type=Path``; the argument's name says which of the two), so the shell offers
paths there and nothing elsewhere. Install (one line, printed by ``--help``):

    bash   skilltrial completion bash > ~/.local/share/bash-completion/completions/skilltrial
    zsh    skilltrial completion zsh > "${fpath[1]}/_skilltrial"       (or any directory on $fpath)
    fish   skilltrial completion fish > ~/.config/fish/completions/skilltrial.fish
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

SHELLS = ("bash", "zsh", "fish")
INSTALL = {
    "bash": "skilltrial completion bash > ~/.local/share/bash-completion/completions/skilltrial",
    "zsh": 'skilltrial completion zsh > "${fpath[1]}/_skilltrial"   # or any directory on $fpath',
    "fish": "skilltrial completion fish > ~/.config/fish/completions/skilltrial.fish",
}
FOLDER_ARGUMENTS = frozenset({"skill", "out", "dir", "shards", "in_dirs", "results", "reuse_baseline_from", "write"})
"""Path arguments that name a folder (the rest of ``type=Path`` name a file)."""


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from _parsers(sub)


def mark_paths(parser: argparse.ArgumentParser) -> None:
    """Tell shtab which arguments complete to files and which to folders."""
    import shtab

    for p in _parsers(parser):
        for action in p._actions:
            if action.type is Path:
                action.complete = shtab.DIRECTORY if action.dest in FOLDER_ARGUMENTS else shtab.FILE  # type: ignore[attr-defined]


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell``."""
    import shtab

    mark_paths(parser)
    return str(shtab.complete(parser, shell=shell))
