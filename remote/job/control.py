"""run/control.json: what `restart` (live re-cap), `stop --grace` and `--drain` ask of the running
runner. Each request has a sequence number; the answer is status.json's `control_seq`."""

from __future__ import annotations

from ..common import procinfo
from ..common.jobspec import Paths


class ControlWatcher:
    def __init__(self, paths: Paths, token: str):
        self.paths, self.token = paths, token
        self.seq = 0  # the last request taken
        self.error: str | None = None  # why the last re-cap was refused
        self._mtime = None

    def poll(self) -> dict | None:
        """The new request meant for this runner, if one came since the last poll (one stat() when
        nothing changed: cheap enough for every quarter second)."""
        try:
            mtime = self.paths.control.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if mtime == self._mtime:
            return None
        self._mtime = mtime
        req = procinfo.read_json(self.paths.control)
        if not req or int(req.get("seq", 0)) <= self.seq:
            return None
        if req.get("token") not in (None, self.token):
            return None  # meant for another runner
        self.seq = int(req["seq"])
        return req
