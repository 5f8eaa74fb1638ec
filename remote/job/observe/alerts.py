"""stalled, engine_down (and engine_up), engine_degraded: told through job.notify once each time
they begin. The runner keeps one for every stage (stalled); a stage that asks through the engine
pool checks the engine's with it too."""

from __future__ import annotations

from typing import Callable

from ...common.notify import Notifier
from ..engine.pool import Pool


class AlertWatcher:
    def __init__(
        self,
        notifier: Notifier,
        log: Callable[[str], None],
        down_deadline: float,
        message: Callable[[str], str],
    ):
        self.notifier, self.log, self.message = notifier, log, message
        self.down_deadline = down_deadline
        self._active: set[str] = set()  # conditions notified and not yet cleared

    def check_stall(self, stalled: bool, what: str) -> None:
        """`what`: what has not happened, and for how long."""
        if self._begins("stalled", stalled):
            self.log(f"stalled: {what}")
            self.notifier.send("stalled", self.message(f"stalled: {what}"))

    def check_engine(self, now: float, pool: Pool | None, engine_error: str | None) -> None:
        down = pool.all_down_since() if pool else None
        # a server restart is not worth a message: every server silent for a while is
        if down is not None and now - down >= min(60.0, self.down_deadline / 2):
            if "engine_down" not in self._active:
                self._active.add("engine_down")
                what = (
                    f"engine down: no server answers for {now - down:.0f}s ({engine_error}); "
                    f"the job fails after {self.down_deadline:g}s"
                )
                self.notifier.send("engine_down", self.message(what))
        elif down is None and "engine_down" in self._active:
            self._active.discard("engine_down")
            self.notifier.send("engine_up", self.message("engine up: a server answers again"))
        bad = [e for e in (pool.endpoints if pool else ()) if e.degraded(now)]
        if self._begins("engine_degraded", bool(bad)):
            what = ", ".join(f"{e.url} ({e.recent_stuck.count(now)} stuck)" for e in bad)
            self.log(f"degraded: requests get stuck while others are answered: {what}")
            self.notifier.send(
                "engine_degraded",
                self.message(
                    f"engine degraded: {what} in the last 10 min while it answers others: likely a "
                    "dead data-parallel rank; `invoke server.status` over the group names it"
                ),
            )

    def _begins(self, condition: str, now_true: bool) -> bool:
        """Whether `condition` holds now and did not at the last check."""
        if not now_true:
            self._active.discard(condition)
            return False
        begins = condition not in self._active
        self._active.add(condition)
        return begins
