"""The one exception type that carries an expected failure to the CLI, and its exit codes."""

from __future__ import annotations

from remote.common.keys import BadValue
from remote.common.wire import ExitCode

__all__ = ["ExitCode"]  # the one table of exit codes, shared with the host


class DeployToolError(Exception):
    """An expected failure: printed as one line, no traceback."""

    code: ExitCode = ExitCode.FAILED
    host: str | None = None  # the one host it is about: the commands its hint names act on it

    def __init__(self, message: str, code: ExitCode | None = None, details=()):
        super().__init__(message)
        if code is not None:
            self.code = code
        # lines shown before the one-line error (the runner's or the server's last log lines)
        self.details: tuple[str, ...] = tuple(details or ())


class ConfigError(DeployToolError, BadValue):
    code = ExitCode.BAD_INPUT


class UsageError(DeployToolError):
    code = ExitCode.BAD_INPUT


class ConnectError(DeployToolError):
    """Unreachable host, auth failure, host-key refusal."""


class RemoteError(DeployToolError):
    """A command on the host failed."""


class MultiHostError(DeployToolError):
    """Several hosts ran; some failed. Carries every host's result (fabric's GroupException idea)."""

    def __init__(self, results: dict, failures: dict[str, DeployToolError]):
        self.results = results
        self.failures = failures
        lines = [f"{host}: {err}" for host, err in failures.items()]
        codes = {e.code for e in failures.values()}
        code = ExitCode.BAD_INPUT if codes == {ExitCode.BAD_INPUT} else ExitCode.FAILED
        details = [f"{host}: {line}" for host, err in failures.items() for line in err.details]
        super().__init__("; ".join(lines), code, details)
