"""One dataset's counts while a stage asks the server for its items (a row's hidden states, a
held-out prompt's answer): what is in flight, what failed and what this runner made, its tokens'
rate and its speed over every runner's time. The one type those stages count in, said once as
status.json's dataset row."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...common.status import DatasetState, DatasetStatus
from .rates import ActiveTime, RateWindow


@dataclass(kw_only=True)
class DatasetCounts:
    """A stage's dataset extends it with its `target` (items to make) and what it stores."""

    in_flight: int = 0
    failed: int = 0  # this runner's: asked again by the next restart
    new: int = 0  # made by this runner
    made: RateWindow = field(default_factory=RateWindow)  # tokens made: its recent rate
    active: ActiveTime = field(default_factory=ActiveTime)  # its speed, every runner's time

    def work_state(self, done: int, left: bool, budget_reached: bool = False) -> str:
        return DatasetState.of(
            done=done,
            target=self.target,
            left=left,
            in_flight=self.in_flight,
            failed=self.failed,
            busy=self.new,
            budget_reached=budget_reached,
        )

    def work_status(
        self, now: float, started: float, *, done: int, records: int, tokens: int, **more
    ) -> DatasetStatus:
        """status.json's row: `done` of the target, `records` kept (the mean is over them),
        `tokens` of the target's items; `more`: the stage's own fields (its state first)."""
        return DatasetStatus(
            done=done,
            target=self.target,
            records=records,
            prompts=self.target,
            completion_tokens=tokens,
            errors=self.failed,
            failed_this_run=self.failed,
            in_flight=self.in_flight,
            new_records=self.new,
            tokens_per_s=self.made.per_s(now, started),
            mean_tokens_per_s=self.active.per_s(now),
            **more,
        )
