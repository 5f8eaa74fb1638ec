"""The envelope every host command prints, the typed faults, and the strict codec of answers
(standard library only). See protocol.py for the requests."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from .codec import from_dict, plain

# the version of requests and answers: a change to a field of either is a new one. A host refuses a
# request of another before doing anything; deploytool says so of an answer of another
PROTOCOL = 15

# ------------------------------------------------------------------ faults


class ExitCode(enum.IntEnum):
    """Every exit status of both sides: deploytool's commands, the host's commands, the runner."""

    OK = 0
    FAILED = 1  # the operation failed (on the host, or the connection to it); a job that failed
    BAD_INPUT = 2  # config, flags, a dataset the job lacks: nothing was done
    NOT_DEPLOYED = 97  # the host has no current release (the shell line before `python -m remote`)
    NO_REMOTE_DIR = 96  # the host has no remote_dir at all (that shell line too)


# each fault's code, and the exit status the host gives it
FAULTS = {
    "usage": ExitCode.BAD_INPUT,  # the command line itself is wrong (an unknown subcommand, a bad flag)
    "unknown_dataset": ExitCode.BAD_INPUT,  # a dataset named that the deployed job lacks
    "bad_config": ExitCode.BAD_INPUT,  # a hosts.yaml value this host shows wrong (no such folder)
    "busy": ExitCode.FAILED,  # a runner is already running
    "gpu_busy": ExitCode.FAILED,  # other processes hold GPU memory
    "preflight": ExitCode.FAILED,  # the host's python cannot import what the engine needs
    "model": ExitCode.FAILED,  # a server does not serve the job's model
    "start_failed": ExitCode.FAILED,  # the runner or server exited or did not come up
    "refused": ExitCode.FAILED,  # the running runner refused the new caps
    "settings": ExitCode.BAD_INPUT,  # the job's settings are not those its records were made with
    "server": ExitCode.FAILED,  # the server could not be started or asked
    "cancelled": ExitCode.FAILED,  # a stop typed meanwhile ended it
    "replaced": ExitCode.FAILED,  # a server swap whose process was gone, ended by a command typed
    "bug": ExitCode.FAILED,  # an exception of ours, said where it would otherwise be lost
}


@dataclass
class Fault:
    code: str
    message: str
    fix: str = ""
    log: list[str] = field(default_factory=list)
    detail: dict = field(default_factory=dict)  # the code's own facts (a GPU report, a problem)


class HostFault(Exception):
    """Raised by a handler on the host: becomes the envelope's fault."""

    def __init__(self, code: str, message: str, *, fix: str = "", log=(), **detail):
        if code not in FAULTS:  # a bug of ours: say which code, even under python -O
            raise ValueError(f"unknown fault code {code!r}; known: {', '.join(FAULTS)}")
        super().__init__(message)
        self.fault = Fault(code, message, fix, list(log), detail)


class ProtocolError(ValueError):
    """What the host printed is not this contract's (another release, or not an envelope)."""


def envelope(answer) -> dict:
    return {"protocol": PROTOCOL, "ok": True, "answer": to_wire(answer)}


def fault_envelope(fault: Fault) -> dict:
    return {"protocol": PROTOCOL, "ok": False, "fault": to_wire(fault)}


REQUEST_FLAG = "--request"  # `python -m remote --request`: the request comes as JSON on stdin


def request_json(request) -> bytes:
    """A request as deploytool sends it: its command and its typed fields, on stdin (never on a
    command line, where a process list would show a key or a token)."""
    data = {"protocol": PROTOCOL, "command": list(request.command), "request": to_wire(request)}
    return json.dumps(data).encode()


def read_envelope(data: dict, answer_type: type):
    """The typed answer, or the Fault; ProtocolError when it speaks another contract."""
    if not isinstance(data, dict) or data.get("protocol") != PROTOCOL:
        got = data.get("protocol", 1) if isinstance(data, dict) else "none"
        if isinstance(got, int) and got > PROTOCOL:
            raise ProtocolError(
                f"the host runs a newer release (protocol {got}) than this deploytool "
                f"({PROTOCOL}): update this checkout, or `invoke deploy` to put its release there"
            )
        raise ProtocolError(
            f"the host's release speaks protocol {got}, this deploytool {PROTOCOL}: run "
            "`invoke deploy` to bring the host up to date"
        )
    try:
        if data.get("ok"):
            return from_wire(answer_type, data.get("answer"))
        return from_wire(Fault, data.get("fault"))
    except ProtocolError as e:  # the envelope's version agrees, the answer's shape does not
        raise ProtocolError(f"{e} (a host of another release: run `invoke deploy`)") from None


# ------------------------------------------------------------------ the wire: typed, strict


def to_wire(obj) -> Any:
    return plain(obj, keep_none=True)


def from_wire(cls: type, data):
    """`cls` from what to_wire wrote: every field present, no other key (both sides are one release)."""
    try:
        return from_dict(cls, data, strict=True)
    except (TypeError, ValueError) as e:
        raise ProtocolError(str(e)) from None
