"""One exception root for everything the harness reports to a person.

Each class carries the process exit code and a message that says what happened
and what to do. Only ``harness.cli`` prints these and exits; a traceback is
shown only with ``--debug``. Third-party errors (docker, git, OSError) are
translated into these at the boundary where they enter, with ``raise ... from``.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Root of every error the harness raises on purpose."""

    exit_code = 3

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(HarnessError):
    """Bad input: a file is missing, malformed, or a field is wrong. Names file and field."""

    exit_code = 4

    def __init__(self, path: object, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        where = f"{path}" + (f": field '{field}'" if field else "")
        super().__init__(f"{where}: {message}", hint=hint)
        self.path = str(path)
        self.field = field


class LockError(HarnessError):
    """The preregistration is not locked, or something it covers changed since."""

    exit_code = 4


class PrerequisiteError(HarnessError):
    """Something the harness needs on this machine is missing (engine, image, key)."""

    exit_code = 5


class NeedsLocalEngine(PrerequisiteError):
    """The engine is remote (another machine) and a step needs a path of this machine in a container:
    it cannot run there at all, so the run stops instead of retrying it as an infrastructure error."""


class InfraError(HarnessError):
    """The environment broke (engine, network, image, git): never the agent's fault."""

    exit_code = 3


class SandboxTimeout(InfraError):
    """A container did not finish before its host-side deadline and was killed."""


class ResumeError(HarnessError):
    """An experiment directory cannot be resumed safely (other lock, torn beyond repair)."""

    exit_code = 4


class ResultsUnavailable(HarnessError):
    """An experiment directory has no usable results or decision: ``skilltrial gate`` exits 3."""

    exit_code = 3


class MergeError(HarnessError):
    """The shard directories cannot be combined into one valid experiment."""

    exit_code = 4


class Interrupted(HarnessError):
    """SIGINT/SIGTERM arrived; everything was torn down and results.jsonl stays valid."""

    exit_code = 130
