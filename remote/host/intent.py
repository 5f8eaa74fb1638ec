"""run/supervise.json: what should be running, said by the commands, obeyed by the watcher.

`restart` / `server.start` say "wanted" (with what it takes to start it again: the runner's flags,
the server's spec), `stop` / `server.stop` say "not wanted" *before* they signal anything, and the
watcher restarts only what is wanted. Both sides hold run/supervise.lock while they read-modify-write
or act on it, so a stop never races a restart: once `stop` has said its word, nothing it stops comes
back. The file holds the server's environment (HF_TOKEN), so it is readable by its owner only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

from ..common.jobspec import Paths
from ..common.recover import RecoverSpec


def read(paths: Paths) -> dict:
    try:
        with open(paths.supervise) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def locked(paths: Paths):
    """Held while deciding and acting on the intent (the watcher's tick, a command's change)."""
    paths.ensure()
    fd = os.open(paths.run / "supervise.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write(paths: Paths, data: dict) -> None:
    tmp = paths.supervise.with_name(f".{paths.supervise.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, paths.supervise)


def change(paths: Paths, *, recover: RecoverSpec | None = None, **parts: dict) -> dict:
    """Merge `server={...}` / `runner={...}` (and the recover settings) into the intent; call it
    while holding `locked`."""
    data = read(paths)
    if recover is not None:
        data["recover"] = recover.to_dict()
    for key, value in parts.items():
        data[key] = dict(data.get(key) or {}, **value, changed_at=time.time())
    _write(paths, data)
    return data


def wanted(data: dict, what: str) -> bool:
    return bool((data.get(what) or {}).get("wanted"))


def recover_spec(data: dict) -> RecoverSpec:
    return RecoverSpec.from_dict(data.get("recover"))
