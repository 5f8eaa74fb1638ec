"""run/watch.json and run/server.pid as the runner reads them: is the watcher restarting the server
(then an unreachable engine is no reason to fail the job: down_deadline counts from the end of the
recovery, not from the death), and has a server started on this host just become ready, by the
watcher or by `server.start` (then every down server is probed at once, not at the end of a backoff
that grows to a minute)."""

from __future__ import annotations

from pathlib import Path

from ...common.recover import WatchState, watcher_alive
from ...common.state import ServerRecord

_UNSEEN = object()  # before the first look: a server ready then is no news


class WatchView:
    def __init__(self, path: Path, every: float = 1.0, server_pid: Path | None = None):
        self.path, self.every, self.server_pid = path, every, server_pid
        self.server_recovering = False
        self.recovering_at = 0.0  # the last time the watcher was seen restarting the server
        self._seq: int | None = None
        self._ready_at: object = _UNSEEN
        self._next = 0.0

    def poll(self, now: float) -> bool:
        """Read the file (at most every `every` s); True when a restarted server became ready."""
        if now < self._next:
            return False
        self._next = now + self.every
        ws = WatchState.read(self.path)
        # by watch.json's one rule: a watcher status calls gone restarts no server for us either
        fresh = ws is not None and watcher_alive(
            None if ws.updated_at is None else now - ws.updated_at
        )
        self.server_recovering = bool(fresh and ws.server.recovering)
        if self.server_recovering:
            self.recovering_at = now
        seq = ws.server_ready_seq if fresh else self._seq
        ready = self._seq is not None and seq != self._seq
        self._seq = seq
        return self._started_here() or ready

    def _started_here(self) -> bool:
        """A server start on this host became ready since the last look (its record's ready_at)."""
        if self.server_pid is None:
            return False
        rec = ServerRecord.read(self.server_pid)
        ready_at = rec.ready_at if rec is not None else None
        new = self._ready_at is not _UNSEEN and ready_at is not None and ready_at != self._ready_at
        self._ready_at = ready_at
        return new

    def reprobe(self, now: float, pool, log) -> None:
        """A server started again is ready: probe every down server now."""
        if self.poll(now) and pool is not None:
            for e in pool.endpoints:
                if not e.reachable:
                    e.next_probe = 0.0
                    log(f"server {e.url}: a server started on this host is ready; probing now")
