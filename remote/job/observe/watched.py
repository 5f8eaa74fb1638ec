"""run/watch.json as the runner reads it: is the watcher restarting the server (then an unreachable
engine is no reason to fail the job: down_deadline counts from the end of the recovery, not from the
death), and has a server it restarted just become ready (then every down server is probed at once,
not at the end of its backoff)."""

from __future__ import annotations

from pathlib import Path

from ...common.recover import WatchState

FRESH_S = 30.0  # a watch.json older than this speaks for a watcher that is gone


class WatchView:
    def __init__(self, path: Path, every: float = 1.0):
        self.path, self.every = path, every
        self.server_recovering = False
        self.recovering_at = 0.0  # the last time the watcher was seen restarting the server
        self._seq: int | None = None
        self._next = 0.0

    def poll(self, now: float) -> bool:
        """Read the file (at most every `every` s); True when a restarted server became ready."""
        if now < self._next:
            return False
        self._next = now + self.every
        ws = WatchState.read(self.path)
        fresh = ws is not None and ws.updated_at is not None and now - ws.updated_at < FRESH_S
        self.server_recovering = bool(fresh and ws.server.recovering)
        if self.server_recovering:
            self.recovering_at = now
        seq = ws.server_ready_seq if fresh else self._seq
        ready = self._seq is not None and seq != self._seq
        self._seq = seq
        return ready

    def reprobe(self, now: float, pool, log) -> None:
        """A server the watcher restarted is ready: probe every down server now."""
        if self.poll(now) and pool is not None:
            for e in pool.endpoints:
                if not e.reachable:
                    e.next_probe = 0.0
                    log(f"server {e.url}: restarted by the watcher; probing now")
