"""The runner watches the watcher: a watcher killed (kill -9, the OOM killer) while something is
to be kept is started again within seconds, so the next server death is still healed at 3 a.m.
Never two: the watcher holds run/watcher.lock, and a second one exits at once. Killing the watcher
and the runner together is the one case left to `invoke restart` (status says so)."""

from __future__ import annotations

import sys
from typing import Callable

from ...common.jobspec import Paths, release_dir
from ...common.state import Supervise, WatcherRecord, record_event, start_watcher

CHECK_EVERY_S = 2.0


def watcher_wanted(paths: Paths) -> bool:
    """supervise.json says the watcher is to keep something."""
    want = Supervise.read(paths.supervise)
    return want is not None and (want.watched("server") or want.watched("runner"))


class WatcherGuard:
    def __init__(self, paths: Paths, log: Callable[[str], None], tell: Callable[[str, str], None]):
        self.paths, self.log, self.tell = paths, log, tell
        self.restarts = 0
        self._next = 0.0

    def check(self, now: float) -> bool:
        """Start the watcher again if it is wanted and gone; True when it did. One that ended by
        itself (nothing to watch, a moment before a restart wanted it again) took its pid file with
        it: started again, neither counted nor told as a death."""
        if now < self._next:
            return False
        self._next = now + CHECK_EVERY_S
        if not watcher_wanted(self.paths) or WatcherRecord.running(self.paths):
            return False
        killed = self.paths.watcher_pid.exists()
        proc = start_watcher(self.paths, sys.executable, release_dir())
        if proc is None:  # one is starting: its lock was taken between the look and the start
            return False
        if not killed:
            self.log(f"the watcher had ended (nothing to watch then): started it (pid {proc.pid})")
            return True
        self.restarts += 1
        what = f"the watcher was gone (killed?): started it again (pid {proc.pid})"
        self.log(what)
        self.tell("watcher_restarted", what)
        # in the record of deaths and restarts `report` lists, as the watcher's own of the others
        record_event(self.paths, "watcher", "restarted", "gone (killed?); the runner started it")
        return True
