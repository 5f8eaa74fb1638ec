"""run/control.json: what `restart` (live re-cap), `stop --grace` and `--drain` ask of the running
runner (each request has a sequence number; the answer is status.json's `control_seq`); the stop and
drain state it leads to, held once; the clocks housekeeping keeps."""

from __future__ import annotations

import time

from ...common.jobspec import Paths
from ...common.state import ControlRequest


class ControlWatcher:
    def __init__(self, paths: Paths, token: str):
        self.paths, self.token = paths, token
        self.seq = 0  # the last request taken
        self.error: str | None = None  # why the last re-cap was refused
        self._mtime = None

    def poll(self) -> ControlRequest | None:
        """The new request meant for this runner, if one came since the last poll (one stat() when
        nothing changed: cheap enough for every quarter second)."""
        try:
            mtime = self.paths.control.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if mtime == self._mtime:
            return None
        self._mtime = mtime
        req = ControlRequest.read(self.paths.control)
        if req is None or req.seq <= self.seq:
            return None
        if req.token not in (None, self.token):
            return None  # meant for another runner
        self.seq = req.seq
        return req


class StopState:
    """Whether the job was asked to stop (a signal: in-flight requests get the grace period) or to
    drain (`stop --drain`: they finish): held once, read by the runner and the dispatcher alike."""

    def __init__(self):
        self.stopping = False
        self.draining = False
        self.signal: str | None = None  # the first one that came
        self.by_deploytool = False  # a stop of deploytool's said so before any signal (its grace)

    @property
    def asked(self) -> bool:
        """No new requests."""
        return self.stopping or self.draining

    def stop(self, signame: str = "a signal") -> bool:
        """Asked to stop; True when it was asked already (a second signal: stop now)."""
        again, self.stopping = self.stopping, True
        self.signal = self.signal or signame
        return again

    def drain(self) -> None:
        self.draining = True

    def tell(self) -> None:
        """A stop of deploytool's said its grace. One that comes after another's signal stopped
        nothing: the stop was begun by that signal, and is said so."""
        self.by_deploytool = self.by_deploytool or not self.stopping

    @property
    def foreign(self) -> str | None:
        """The signal, not of deploytool's, that began the stop."""
        return self.signal if self.stopping and not self.by_deploytool else None

    def verdict(self) -> str:
        if not self.stopping:
            return "drained"
        if self.by_deploytool:
            return "stopped as asked (a stop or a restart)"
        return f"stopped by {self.signal}, not by deploytool (someone's kill, a shutdown)"


class Every:
    """A housekeeping clock: due at once, then once per `period_s` (a slow tick never makes a chore
    run twice in a row to catch up)."""

    def __init__(self, period_s: float, clock=time.monotonic):
        self.period_s, self.clock, self._next = period_s, clock, float("-inf")

    def due(self) -> bool:
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.period_s
        return True
