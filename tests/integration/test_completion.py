"""Shell completion (issue 23 item 4): the scripts ``skilltrial completion bash|zsh|fish`` print, loaded
into the real shells, complete what the parser has.

bash: the script is sourced and its completion function called the way readline calls it (COMP_WORDS,
COMP_CWORD), and COMPREPLY read back. fish: ``complete -C`` asks fish itself for the completions of a
command line. zsh: completion needs a terminal (zpty), so the test loads the script through compinit as a
user's fpath would, checks it is registered for ``skilltrial``, and calls its subcommand lister with
``_describe`` replaced by a printer. Every expectation comes from the parser, so a new subcommand or
option is checked without editing this file. zsh and fish come from Debian (scripts/ensure-shells.sh);
without them their test is skipped with that reason.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import completion
from harness.cli import _parser, main

BASH, ZSH, FISH = (shutil.which(s) for s in ("bash", "zsh", "fish"))


def _subcommands() -> set[str]:
    (sub,) = (a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _script(shell: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["completion", shell], env={}) == 0
    path = tmp_path / f"skilltrial.{shell}"
    path.write_text(capsys.readouterr().out)
    return path


def _bash_complete(script: Path, line: str, cwd: Path) -> list[str]:
    """COMPREPLY for ``line`` (completing its last word) in a real bash with ``script`` sourced."""
    program = f"""
source {script}
func=$(complete -p skilltrial | sed -E 's/.*-F ([^ ]+) .*/\\1/')
COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}
read -r -a COMP_WORDS <<< "$COMP_LINE"
[[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
"$func" skilltrial "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    assert BASH is not None
    done = subprocess.run([BASH, "--norc", "--noprofile", "-c", program], cwd=cwd, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [w.strip() for w in done.stdout.splitlines() if w.strip()]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_bash_completes_subcommands_options_choices_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script("bash", tmp_path, capsys)
    (tmp_path / "prereg.yaml").write_text("skill: x\n")
    assert set(_bash_complete(script, "skilltrial ", tmp_path)) >= _subcommands()
    assert _bash_complete(script, "skilltrial ev", tmp_path) == ["eval"]
    assert set(_bash_complete(script, "skilltrial images ", tmp_path)) == {"build", "status", "prune"}
    assert set(_bash_complete(script, "skilltrial completion ", tmp_path)) == set(completion.SHELLS)
    assert "--reuse-baseline-from" in _bash_complete(script, "skilltrial eval --re", tmp_path)
    assert "start" in _bash_complete(script, "skilltrial docs ", tmp_path)
    assert _bash_complete(script, "skilltrial lock pre", tmp_path) == ["prereg.yaml"], "a file argument: files"
    assert _bash_complete(script, "skilltrial nosuch", tmp_path) == [], "positive control: no match, no reply"


@pytest.mark.skipif(FISH is None, reason="fish is not installed (scripts/ensure-shells.sh installs it from Debian)")
def test_fish_completes_subcommands_options_and_choices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script("fish", tmp_path, capsys)
    assert FISH is not None
    assert subprocess.run([FISH, "--no-execute", str(script)], capture_output=True).returncode == 0

    def complete(line: str) -> set[str]:
        done = subprocess.run([FISH, "--no-config", "-c", f"source {script}; complete -C {line!r}"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return {row.split("\t")[0] for row in done.stdout.splitlines()}

    assert complete("skilltrial ") >= _subcommands()
    assert complete("skilltrial images ") >= {"build", "status", "prune"}
    assert "--jobs" in complete("skilltrial eval --jo")
    assert complete("skilltrial completion ") >= set(completion.SHELLS)
    assert "eval" not in complete("skilltrial images "), "a subcommand's own words only"


@pytest.mark.skipif(ZSH is None, reason="zsh is not installed (scripts/ensure-shells.sh installs it from Debian)")
def test_zsh_loads_the_script_from_fpath_and_lists_every_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script("zsh", tmp_path, capsys)
    fpath = tmp_path / "fpath"
    fpath.mkdir()
    script.rename(fpath / "_skilltrial")  # what the install line does: a file named _skilltrial on $fpath
    assert ZSH is not None
    assert subprocess.run([ZSH, "-n", str(fpath / "_skilltrial")], capture_output=True).returncode == 0
    program = f"""
fpath=({fpath} $fpath)
autoload -U compinit && compinit -u -D
print -r -- "registered:$_comps[skilltrial]"
eval "$(<{fpath}/_skilltrial)"
_describe() {{ print -rl -- ${{(P)2}} }}
_shtab_skilltrial_commands
print -rl -- $_shtab_skilltrial_eval_options
"""
    done = subprocess.run([ZSH, "-f", "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "registered:_skilltrial" in lines, "compinit found the file on fpath and registered it"
    listed = {
        line.split(":", 1)[0] for line in lines if ":" in line and not line.startswith(("registered", "-", '"', "("))
    }
    assert listed >= _subcommands(), _subcommands() - listed
    assert any(line.startswith("--jobs[") for line in lines), "eval's options are there"
    assert any(line.startswith("--out[") and line.endswith("_files -/") for line in lines), "--out completes folders"


def test_the_completion_help_prints_one_install_line_per_shell(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["completion", "--help"], env={})
    out = capsys.readouterr().out
    for shell in completion.SHELLS:
        assert completion.INSTALL[shell] in out
