"""Recovery without anybody at the keyboard: hosts.yaml `recover:`, and the watcher's rules as plain
objects fed with observations and a clock: `Budget` (supervisor's backoff and give-up) and
`WedgeClock` (a vLLM that is alive, answers /health, and makes no progress). `WatchState` is
run/watch.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .codec import Codec, Record
from .keys import boolean, int_in, number, setting
from .status import ProcessState, ProcessWatch, Supervision

BACKOFF_CAP = 300.0  # seconds: the longest wait between two restarts


@dataclass(frozen=True)
class RecoverSpec(Codec):
    """hosts.yaml `recover:`; `recover: false` is `enabled=False`."""

    enabled: bool = True  # `recover: false` said: no key of its own
    server: bool = setting(True, boolean)  # restart the managed vLLM server when it dies or wedges
    runner: bool = setting(True, boolean)  # restart the runner when it dies without being stopped
    max_restarts: int = setting(5, int_in(0, 1000))  # of each process within `window`
    window: float = setting(3600.0, number(1.0))
    # before the first restart; doubles, at most BACKOFF_CAP
    backoff: float = setting(10.0, number(0.0))
    # busy and no token processed for this long: wedged
    wedged_after: float = setting(600.0, number(1.0))
    on_boot: bool = setting(False, boolean)  # a systemd unit brings the watcher back after a reboot

    @classmethod
    def from_dict(cls, d: dict | None) -> "RecoverSpec":
        return super().from_dict(d or {})

    def watches(self, what: str) -> bool:
        return self.enabled and bool(getattr(self, what))


class Budget:
    """Restarts of one process: when the next may happen, and when to give up. As supervisor does,
    a process that had been running (no restart within the window) is started again at once; the
    backoff applies from the second restart on, doubling each time."""

    def __init__(self, spec: RecoverSpec):
        self.spec = spec
        self.restarts: list[float] = []  # when each restart began, within the window

    def _recent(self, now: float) -> list[float]:
        self.restarts = [t for t in self.restarts if now - t < self.spec.window]
        return self.restarts

    def failed(self, now: float) -> float | None:
        """A death (or a failed start): the delay before the next start, None to give up."""
        recent = self._recent(now)
        if len(recent) >= self.spec.max_restarts:
            return None
        if not recent:
            return 0.0
        return min(BACKOFF_CAP, self.spec.backoff * (2 ** (len(recent) - 1)))

    def restarting(self, now: float) -> int:
        """A restart begins now; returns its attempt number within the window (1-based)."""
        self._recent(now).append(now)
        return len(self.restarts)

    def attempt(self, now: float) -> int:
        """The attempt number the next restart would have."""
        return len(self._recent(now)) + 1


@dataclass
class Observation:
    """One look at a ready server: its /metrics counters (None: no answer), /v1/models, and the
    runner's view of it."""

    now: float
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    running: float | None = None  # vllm:num_requests_running
    models_ok: bool = False
    runner_in_flight: int = 0  # the runner's requests on this server (status.json)
    last_token_at: float | None = None  # the last byte any stream of the runner got from it


class WedgeClock:
    """Wedged: requests are inside the server and neither token counter has moved, and no stream has
    delivered a byte, for `after` seconds; or it has answered neither /metrics nor /v1/models for
    that long. The clock starts at readiness, so loading never counts. A busy, healthy engine moves
    a counter every scheduler step (a long prefill, the prompt counter); idle time never counts."""

    def __init__(self, after: float, ready_at: float):
        self.after = after
        self.progress_at = ready_at  # the last time it was idle or made progress
        self.answered_at = ready_at  # the last time /metrics or /v1/models answered
        self._counters: tuple | None = None

    def observe(self, o: Observation) -> str | None:
        """Why the server is wedged, or None."""
        answered = o.generation_tokens is not None or o.prompt_tokens is not None or o.models_ok
        if answered:
            self.answered_at = o.now
        counters = (o.generation_tokens, o.prompt_tokens)
        if o.generation_tokens is not None or o.prompt_tokens is not None:
            if counters != self._counters:
                self.progress_at = o.now
            self._counters = counters
        if o.last_token_at is not None:
            self.progress_at = max(self.progress_at, o.last_token_at)
        busy = bool(o.running) or o.runner_in_flight > 0
        if not busy and answered:
            self.progress_at = o.now
        if o.now - self.answered_at >= self.after:
            return f"neither /metrics nor /v1/models answered for {o.now - self.answered_at:.0f}s"
        if busy and o.now - self.progress_at >= self.after:
            inside = int(o.running or 0) or o.runner_in_flight
            return (
                f"wedged: {inside} request(s) inside and no token processed for "
                f"{o.now - self.progress_at:.0f}s (recover.wedged_after {self.after:g}s)"
            )
        return None


# watch.json's one staleness rule. The watcher rewrites it at least every second (its heartbeat,
# host/watcher/watch.HEARTBEAT_S: how often, not how old), even while it waits inside a long tick:
# a watcher whose file is older than this has stopped or is wedged. Status and tail (it is not
# supervising) and the runner (it is not restarting the server) all judge it by this, through
# watcher_alive, so none trusts a watcher another calls gone
WATCH_STALE_S = 10.0


def watcher_alive(age_s: float | None) -> bool:
    """Whether a watcher that showed life `age_s` seconds ago is at work; None: never. The one
    rule for watch.json (WATCH_STALE_S)."""
    return age_s is not None and age_s < WATCH_STALE_S


@dataclass
class WatchState(Record):
    """run/watch.json: what the watcher is doing, for `ctl status`, the runner and report."""

    KEEP_NONE = True
    SYNC = False

    pid: int | None = None
    updated_at: float | None = None
    server: ProcessWatch = field(default_factory=ProcessWatch)
    runner: ProcessWatch = field(default_factory=ProcessWatch)
    server_ready_seq: int = (
        0  # bumped each time a server it restarted is ready: the runner re-probes
    )
    on_boot: bool = False  # a systemd unit brings it back after a reboot
    ticked_at: float | None = None  # its last look at everything (the heartbeat leaves it)
    next_stage: str | None = None  # the stage it is to start after the one that finished

    def view(self, now: float, live: bool) -> Supervision:
        """What status and tail show; `now` on the host's clock, `live`: the watcher still works."""
        for w in (self.server, self.runner):
            if not live and w.recovering:
                w.move(ProcessState.IDLE)  # a recovery nobody carries on any more: no next try
            w.next_try_in_s = None if w.next_try_at is None else max(0.0, w.next_try_at - now)
        return Supervision(
            enabled=True,
            supervised=live,
            pid=self.pid,
            server=self.server,
            runner=self.runner,
            on_boot=self.on_boot,
            ticked_at=self.ticked_at,
            next_stage=self.next_stage,
        )
