"""status.json, the one typed definition: the runner writes it every second, and once it is gone
only `state.settle` does. Derived values are properties here, so no reader recomputes them.
Readers ignore keys they do not know and default missing ones: both sides of a deploy read each
other's files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import zip_longest

from .caps import CapRow, Caps
from .codec import Codec, Record
from .stages import FIRST, StageSpec, stage_of


class JobState(StrEnum):
    """The job's states (status.json `state`): the runner's, or what `ctl status` finds."""

    STARTING = "starting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"


class DatasetState(StrEnum):
    """One dataset's state within the job."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"  # every prompt tried; the missing ones are in <DS>.errors.jsonl

    @classmethod
    def of(
        cls, *, done, target, left, in_flight, failed, busy, budget_reached=False
    ) -> DatasetState:
        """A dataset's state in every stage; `busy`: it has asked in this run."""
        if done >= target or (budget_reached and not in_flight):
            return cls.COMPLETE
        if not left and not in_flight and failed:
            return cls.INCOMPLETE
        return cls.RUNNING if in_flight or busy else cls.PENDING


class ProcessState(StrEnum):
    """The watcher's view of one supervised process (server or runner)."""

    IDLE = "idle"  # nothing to keep, or left alone (it ended by its own verdict)
    WATCHING = "watching"
    BACKOFF = "backoff"  # dead, waiting before the next start
    STARTING = "starting"  # started again, not yet up
    FATAL = "fatal"  # gave up: past the restart budget, or a start that cannot work


# Fields hold a state as its string (what the file has): an older or newer release may write a
# state this one does not know, and reading it must not fail. Members compare equal to the strings.
NEVER_RUN = "never run"
BUDGET_REACHED = "budget reached"  # a dataset its token budget ended short of its target
NOT_RUN = "not run"  # a dataset that --datasets leaves out
RECOVERING = "recovering"  # a job whose runner is gone and that the watcher starts again
SWITCHING = "switching"  # a job whose server the host starts again for the next stage's runner
STOPPING = "stopping"  # a runner in a stop's grace: its file still says running
DRAINING = "draining"  # a runner that sends nothing new and lets its answers in flight finish
RESTARTING = "restarting"  # a restart under way on the host, between its stop and its start
DIED = "died"  # a runner gone without its verdict (killed) that nothing starts again
GONE = "the runner is gone without writing its status (killed?)"
# status.json's one staleness rule: a runner rewrites it every second, so one not rewritten for
# this long is no runner at work now (wedged, its disk stalled): status and tail say so alike
# (JobStatus.stale_for), and the watcher's wedge clock no longer counts the requests it says are
# inside a server (JobStatus.fresh)
STALE_AFTER = 30.0
TERMINAL = frozenset({JobState.FINISHED, JobState.FAILED, JobState.STOPPED})


@dataclass
class Reload(Codec):
    """A prompt file a re-cap reloaded: its prompts before and after."""

    before: int = 0
    after: int = 0


def file_identity(st) -> dict:
    """A file version (from an os.stat_result), as a dataset's `prompts_file` says it."""
    return {
        "size": st.st_size,
        "mtime": st.st_mtime,
        "mtime_ns": st.st_mtime_ns,
        "inode": st.st_ino,
    }


def count_prompts(path) -> int:
    """A prompt file's prompts: its non-blank lines, readable or not (the runner records an
    unreadable one as an error)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


@dataclass
class DraftCounts(Codec):
    """vLLM's speculative-decoding counters (cumulative over a server's life), or a sum of their
    deltas: drafts proposed, draft tokens, those accepted, and accepted at each draft position."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: list[float] = field(default_factory=list)

    def since(self, before: DraftCounts | None) -> DraftCounts:
        """What was counted after `before` (a sample of the same server); a counter lower than it
        says the server started again: then all of this life's counts."""
        if before is None:
            return self
        pos = list(before.per_position) + [0.0] * len(self.per_position)
        pairs = [(self.drafts, before.drafts), (self.draft_tokens, before.draft_tokens)]
        pairs += [(self.accepted, before.accepted)] + list(zip(self.per_position, pos))
        if any(now < then for now, then in pairs):
            return self
        return DraftCounts(*(now - then for now, then in pairs[:3]), [a - b for a, b in pairs[3:]])

    def plus(self, other: DraftCounts) -> DraftCounts:
        pairs = zip_longest(self.per_position, other.per_position, fillvalue=0.0)
        pos = [a + b for a, b in pairs]
        return DraftCounts(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted,
            pos,
        )

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens a target step makes on average: its own one, and the draft's it accepted."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def acceptance_rates(self) -> list[float]:
        """At each draft position, the share of drafts whose token there was accepted."""
        return [p / self.drafts for p in self.per_position] if self.drafts else []

    def by_position(self, sep: str = " ") -> str:
        """The acceptance at each draft position, as every view and the log say it: `86% 71% 64%`."""
        return sep.join(f"{r:.0%}" for r in self.acceptance_rates) or "-"


@dataclass
class DraftKept(Record):
    """<tag>/<DS>.counts.json: what the draft stage counted of a dataset so far."""

    held: str = ""  # a fingerprint of its held-out prompts' ids: the counts are of those
    counts: DraftCounts = field(default_factory=DraftCounts)
    # its speed, every runner's: the seconds a request of it was in flight and the output tokens of
    # the answers made in them, in one write, so a kill loses of both together (None: a release
    # before this one, whose seconds were its wall time, kept no tokens: its answers' are used)
    seconds: float = 0.0
    tokens: int | None = None
    # each server's counters at its last sample, which the counts reach: kept in the same write,
    # so a kill -9 between two writes can never count a sample's growth twice or lose it
    last: dict[str, DraftCounts] = field(default_factory=dict)


@dataclass
class DatasetStatus(Codec):
    state: str = DatasetState.PENDING
    done: int = 0  # records among the target's prompts
    target: int = 0
    records: int = 0  # every record of the dataset, in the target or not
    prompts: int = 0
    completion_tokens: int = 0  # of the records in the target
    mean_tokens: float = 0.0  # of every record
    errors: int = 0  # lines in <DS>.errors.jsonl
    failed_this_run: int = 0
    in_flight: int = 0
    # of those, sent before a re-cap lowered the target below them: they finish, kept beyond it
    in_flight_beyond: int = 0
    new_records: int = 0  # written by this runner
    finish_length: int = 0  # of the records in the target: cut at max_tokens
    empty: int = 0  # of this runner's records: no answer text
    tokens_per_s: float = 0.0  # the last minute; 0 while the runner is young (speed.job_rate)
    samples_per_s: float = 0.0
    mean_tokens_per_s: float | None = None  # over the time the job made tokens, every runner's
    budget: int | None = None
    budget_reached: bool = False
    remaining_tokens: int = 0
    eta_s: int | None = None
    prompts_file: dict = field(default_factory=dict)  # path, size, mtime, inode of the file in use
    prompts_changed: bool = False  # the file on the host is not the one in use
    draft: DraftCounts | None = None  # the draft stage's: its counters' deltas over the dataset

    @property
    def is_complete(self) -> bool:
        return self.state == DatasetState.COMPLETE

    @property
    def beyond(self) -> int:
        """Records beyond the cap (made before it was lowered, or of prompts the file no longer has
        among its first N): kept, counted in none of the rest. A dataset not in --datasets (no
        target) has none."""
        return max(0, self.records - self.done) if self.target else 0

    @property
    def state_label(self) -> str:
        """Its state as a person is told it: short of its target by its token budget says so
        (`complete` alone would read as every prompt answered)."""
        if self.budget_reached and self.done < self.target:
            return BUDGET_REACHED
        return self.state

    def under(self, target: int, done: int, budget: int | None) -> DatasetStatus:
        """As it would stand under another target and token budget (a dry run's), by the runner's
        own rule as far as these counts tell: its tokens are those of the target it has now, and
        its answers in flight go on. A state the job's end left on it (`stopped`: no dataset's
        word) is reckoned anew, as the runner a restart starts begins it."""
        same = (target, done, budget) == (self.target, self.done, self.budget)
        if same and self.state in set(DatasetState):
            return self
        reached = budget is not None and self.completion_tokens >= budget
        state = DatasetState.of(
            done=done,
            target=target,
            left=done < target,
            in_flight=self.in_flight,
            failed=self.failed_this_run,
            busy=self.state == DatasetState.RUNNING,
            budget_reached=reached,
        )
        return replace(
            self, state=state, target=target, done=done, budget=budget, budget_reached=reached
        )


def planned_state(row: CapRow, d: DatasetStatus | None, caps: Caps) -> str:
    """A dry run's state of a dataset under the caps it would run: what status would then say,
    as far as the counts tell (`?` where its done is a range; none where nothing is known)."""
    if not row.selected or not row.prompts:
        return ""
    if row.done_most is not None:
        return "?"
    return (d or DatasetStatus()).under(row.target, row.done, caps.max_tokens).state_label


@dataclass
class ServerMetrics(Codec):
    """A server's own view, from its /metrics (vLLM's names; None where it has no such series)."""

    running: float | None = None  # requests in the batch (None: the gauge read stale)
    waiting: float | None = None  # requests queued inside the server
    kv_cache: float | None = None  # 0-1, averaged over data-parallel engines
    generation_tokens_per_s: float | None = None  # since the sample before
    preemptions: float | None = None  # counter
    new_preemptions: int | None = None  # since the sample before
    room_samples: int = 0  # samples in a row with nothing waiting and KV cache to spare


@dataclass
class GpuStatus(Codec):
    index: int = 0
    util: int | None = None  # %
    memory_used: int | None = None  # MiB
    memory_total: int | None = None  # MiB


@dataclass
class DiskStatus(Codec):
    """The outputs' filesystem."""

    free_bytes: int | None = None
    total_bytes: int | None = None
    full: bool = False  # an append failed: answers wait in memory, no new requests
    held: int = 0  # answers waiting for space
    hours_left: float | None = None  # of output at the current rate


@dataclass
class TrainStatus(Codec):
    """The train stage's trainer, as its output says it: where it is, how well the draft guesses."""

    phase: str = ""  # installing the trainer, making the training rows, training, saving the draft
    epoch: int = 0  # the one under way, from 0
    epochs: int = 0
    step: int = 0  # steps done, every epoch's
    steps: int | None = None  # every epoch's steps together, once known
    loss: float | None = None  # the last step's
    accuracy: list[float] = field(default_factory=list)  # the last step's, per draft position
    val_loss: float | None = None  # the last validation's
    val_accuracy: list[float] = field(default_factory=list)
    best_epoch: int | None = None
    tokens_per_s: float = 0.0
    eta_s: int | None = None
    rows: int = 0  # training rows, every dataset's (a weight repeats a dataset's)
    pid: int | None = None  # the trainer's
    restarts: int = 0  # trainers started again after one died
    draft: str | None = None  # the draft it made, as vLLM serves it


@dataclass
class EndpointStatus(Codec):
    """One OpenAI-compatible server the runner sends requests to."""

    url: str
    reachable: bool = True
    in_flight: int = 0
    concurrency: int = 0
    tokens_per_s: float = 0.0
    requests: int = 0  # answered
    errors: int = 0
    down_since: float | None = None
    last_error: str | None = None
    metrics: ServerMetrics | None = None  # the server's own view from /metrics, where sampled
    stuck: int = 0  # requests abandoned for no progress (and sent again)
    stuck_recent: int = 0  # of them, in the last 10 minutes
    answered_recent: int = 0  # answers in the last 10 minutes
    last_token_at: float | None = None  # a stream from it last delivered bytes (for the watcher)

    @property
    def degraded(self) -> bool:
        """Answers some requests while others get stuck: a dead data-parallel rank behind it (its
        share of requests hang), or a server dropping requests."""
        return self.reachable and self.stuck_recent > 0 and self.answered_recent > 0

    def down_for(self, now: float) -> float | None:
        return None if self.down_since is None else now - self.down_since


@dataclass
class EngineStatus(Codec):
    kind: str = "openai"
    model: str = ""
    base_urls: list = field(default_factory=list)
    reachable: bool = True  # at least one server answers
    down_since: float | None = None  # every server has been unreachable since then
    last_error: str | None = None


class SwitchStep(StrEnum):
    """Where a server swap for a restart's stage stands (run/switch.json), in the order it goes."""

    BEGUN = "begun"
    STOPPING_RUNNER = "stopping the runner"
    STOPPING_SERVER = "stopping the server"
    LOADING = "loading"
    STARTING_RUNNER = "starting the runner"
    DONE = "done"
    FAILED = "failed"


@dataclass
class SwitchView(Codec):
    """A restart whose stage needs the job's server started (again) with other flags, carried out
    whole on the host by one detached process, from the stop of the runner to the start of the new
    one: nothing on the laptop's side (a lid closed during the model's load) can leave it half
    done. The watcher's chain to a stage that follows (the baseline) is the same swap. What every
    view shows of it, and how it ended: the answers as their wire form."""

    token: str = ""  # which swap: a laptop follows its own
    stage: str = ""
    why: str | None = None  # why the server is started again (None: it was down)
    by: str = "user"  # or "watcher": a stage asked to follow the one that finished
    step: SwitchStep = SwitchStep.BEGUN
    begun_at: float = 0.0
    step_at: float = 0.0
    model: str = ""
    ready_timeout: float = 0.0
    log_line: str | None = None  # the server log's last line while it loads
    alive: bool = True  # its process (looked up for each view)
    server_stopped: dict | None = None  # answers.ServerStopped, once the old server is stopped
    server_started: dict | None = None  # answers.ServerStarted, once the new one answers
    answer: dict | None = None  # answers.RestartAnswer, once the runner has started
    error: str | None = None  # why it failed
    code: str = ""  # its fault's code (wire.FAULTS: the exit status it gives)
    fix: str = ""
    log: list[str] = field(default_factory=list)
    # the swap that ended just before this one began, as it ended (the watcher's baseline may begin
    # before the laptop that asked for the draft's has read how its own ended)
    before: dict | None = None

    @property
    def ended(self) -> bool:
        return self.step in (SwitchStep.DONE, SwitchStep.FAILED)

    def find(self, token: str) -> SwitchView | None:
        """This swap or the one before it, by its token."""
        if self.token == token:
            return self
        if self.before and self.before.get("token") == token:
            return SwitchView.from_dict(self.before)
        return None


@dataclass
class RunnerInfo(Codec):
    """Added by `ctl status` on the host: is the pid file's process still the runner that wrote it."""

    alive: bool = False
    pid: int | None = None
    release: str | None = None
    uptime_s: float | None = None


RECOVERING_STATES = frozenset({ProcessState.BACKOFF, ProcessState.STARTING})
KEPT_STATES = RECOVERING_STATES | {ProcessState.WATCHING}  # a death is started again

_P = ProcessState
# where a supervised process's state may go (staying is always allowed). `fatal` has no way out: a
# command that wants the process again starts a new watch of it, its restart budget whole
PROCESS_MOVES = {
    _P.IDLE: {_P.WATCHING, _P.STARTING, _P.BACKOFF, _P.FATAL},
    _P.WATCHING: {_P.IDLE, _P.STARTING, _P.BACKOFF, _P.FATAL},
    _P.BACKOFF: {_P.IDLE, _P.WATCHING, _P.STARTING, _P.FATAL},
    _P.STARTING: {_P.IDLE, _P.WATCHING, _P.BACKOFF, _P.FATAL},
    _P.FATAL: set(),
}


class ProcessStateError(AssertionError):
    """A move the watcher's rules do not allow: a bug in the watcher, never something the host did."""


@dataclass
class ProcessWatch(Codec):
    """One supervised process (server or runner) as the watcher sees it."""

    state: str = ProcessState.IDLE
    why: str | None = None  # the cause of the recovery under way, or of the give-up
    attempt: int = 0  # of the restart under way, within the window
    of: int = 0  # recover.max_restarts
    next_try_at: float | None = None
    next_try_in_s: float | None = None  # filled in by `ctl status` (the host's clock)
    restarts: int = 0  # restarts done by this watcher
    last_cause: str | None = None
    log: list = field(default_factory=list)  # lines that say why (a give-up)

    @property
    def recovering(self) -> bool:
        return self.state in RECOVERING_STATES

    def move(self, to: str, **fields) -> None:
        """The one way its state changes, checked against where it starts (as a prompt's in its
        ledger); a time to try again belongs to a backoff only."""
        # a state of another release's watcher, read from its file, may go anywhere
        if to != self.state and to not in PROCESS_MOVES.get(self.state, set(_P)):
            raise ProcessStateError(f"{self.state} -> {to}")
        self.state = to
        if to != _P.BACKOFF:
            self.next_try_at = None
        for name, value in fields.items():
            if name not in self.__dataclass_fields__:
                raise TypeError(f"ProcessWatch has no field {name}")
            setattr(self, name, value)


@dataclass
class Supervision(Codec):
    """What `ctl status` tells about the watcher: shown by status and tail."""

    enabled: bool = False  # a managed job or server wants a watcher
    supervised: bool = False  # and it is alive
    pid: int | None = None
    server: ProcessWatch | None = None
    runner: ProcessWatch | None = None
    on_boot: bool = False
    note: str | None = None  # e.g. "unsupervised: the watcher is gone; `invoke restart` ..."
    ticked_at: float | None = None  # the watcher's last look at everything (host clock)
    next_stage: str | None = None  # the stage it is starting after the one that finished
    restarting: bool = False  # a restart on the host holds the job, between its stop and its start


@dataclass
class KeptStatus(Codec):
    """Unfinished answers' tokens kept for continuing them after a stop."""

    on: bool = False
    why_not: str | None = None  # why restarts ask in-flight answers again from their start
    tokens: int = 0  # tokens of unfinished answers held now (streaming, or waiting to continue)
    waiting: int = 0  # unfinished answers from before this start, not yet continued
    continued: int = 0  # answers continued in this run
    tokens_saved: int = 0  # tokens those continuations did not make again
    started_over: int = 0  # kept answers asked again from their start (the log says why)
    bytes: int = 0  # appended to run/kept.jsonl by this runner
    # tokens/s as they stream, finished or not (last minute): the ETA's pace, kept or not
    streamed_per_s: float = 0.0


@dataclass
class JobStatus(Record):
    """status.json: written by the runner every second (once it is gone, only by `state.settle`).
    What is looked up beside it is JobView's, never this file's."""

    KEEP_NONE = True  # unset fields written as null: readers look its keys up
    SYNC = False  # whole, not synced: it is made again at once

    state: str = NEVER_RUN
    message: str = ""
    pid: int | None = None
    token: str | None = None
    started_at: float | None = None
    updated_at: float | None = None
    release: str | None = None
    root: str | None = None
    caps: dict = field(default_factory=dict)
    # the job's datasets the caps leave out (--datasets): their records kept, in none of the counts
    not_run: list[str] = field(default_factory=list)
    control_seq: int = 0
    control_error: str | None = None
    reloaded: dict[str, Reload] = field(default_factory=dict)  # by the last re-cap
    draining: bool = False
    stopping: float | None = None  # asked to stop: the grace in-flight requests got (seconds)
    signalled: str | None = None  # the signal, not of deploytool's, that began the stop
    abandoned: int = 0
    engine: EngineStatus = field(default_factory=EngineStatus)
    endpoints: list[EndpointStatus] = field(default_factory=list)
    concurrency: int = 0  # requests kept in flight, over every server
    in_flight: int = 0
    tokens_per_s: float = 0.0  # the last minute; 0 while the runner is young (speed.job_rate)
    samples_per_s: float = 0.0
    mean_tokens_per_s: float | None = None
    completion_tokens: int = 0
    errors: int = 0
    retries: int = 0
    eta_s: int | None = None
    # the ETA is reckoned at the job's mean (a young runner with nothing streamed to measure it
    # by): a guess; None: not said (an older release's, starred by its rate)
    eta_guess: bool | None = None
    stalled: bool = False
    last_completion_at: float | None = None
    datasets: dict[str, DatasetStatus] = field(default_factory=dict)
    gpus: list[GpuStatus] | None = None  # from nvidia-smi; None where there is none
    disk: DiskStatus = field(default_factory=DiskStatus)
    train: TrainStatus | None = None  # the train stage's
    notified: list = field(default_factory=list)  # job.notify events sent by this runner, in order
    kept: KeptStatus = field(default_factory=KeptStatus)
    watcher_restarts: int = 0  # a dead watcher started again by this runner
    stage: str = FIRST.name  # what the runner makes: its entry in the stage table
    # each dataset's [seconds its answers were being made, their tokens], and the job's (""), every
    # runner's (rates.ActiveTime): what the next runner's rates start from, kept every second, so a
    # runner killed with -9 before its next minute line in run/history.jsonl loses none of it
    made: dict[str, list] = field(default_factory=dict)  # as written: tokens stay whole numbers

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def stage_spec(self) -> StageSpec:
        return stage_of(self.stage)

    def fresh(self, now: float) -> bool:
        """Rewritten within STALE_AFTER of `now`: what it says in flight is its runner's now."""
        return self.updated_at is not None and now - self.updated_at <= STALE_AFTER

    def stale_for(self, now: float) -> float | None:
        """How long a job not ended has gone without its runner rewriting the file, once that is
        past STALE_AFTER; None otherwise (a verdict is written once, never again: no staleness)."""
        if not self.updated_at or self.terminal or self.fresh(now):
            return None
        return now - self.updated_at

    @property
    def follows(self) -> str | None:
        """The stage its caps ask to follow it once finished (the baseline after the draft)."""
        return Caps.from_dict(self.caps or {}).follows()

    def gone_unless(self, alive: bool) -> JobStatus:
        """A runner gone without writing its verdict (killed with -9) said stopped, never running."""
        if not alive and self.state in (JobState.STARTING, JobState.RUNNING):
            self.end(JobState.STOPPED, GONE)
        return self

    def answering(self, pid: int | None) -> frozenset:
        """The datasets runner `pid` has answers in flight for, where this status is its."""
        if pid is None or self.pid != pid:
            return frozenset()
        return frozenset(n for n, d in self.datasets.items() if d.in_flight)

    def end(self, state: str, message: str, at: float | None = None) -> JobStatus:
        """The job's verdict, whoever says it: nothing is in flight any more, and a dataset that was
        running is as the job is now. Its rates stay: they say how it went."""
        self.state, self.message = state, message
        if at is not None:
            self.updated_at = at
        self.in_flight, self.eta_s, self.stalled = 0, None, False
        for d in self.datasets.values():
            d.in_flight, d.eta_s = 0, None
            if d.state == DatasetState.RUNNING:
                d.state = state
        return self

    @property
    def new_records(self) -> int:
        return sum(d.new_records for d in self.datasets.values())

    @property
    def finish_length(self) -> int:
        return sum(d.finish_length for d in self.datasets.values())

    @property
    def records(self) -> int:
        return sum(d.records for d in self.datasets.values())


@dataclass
class JobView(JobStatus):
    """The job as `ctl status` answers it and every view shows it: status.json, with what the host
    looks up beside it (the runner, strays, the watcher) and what deploytool adds (its host, whether
    hosts.yaml differs). Made for each look; never written."""

    runner: RunnerInfo | None = None
    current_release: str | None = None
    strays: list = field(default_factory=list)
    supervision: Supervision | None = None  # the watcher's view
    host: str | None = None
    deployed_job: str | None = None  # the sha256 of current/job.json
    job_differs: bool = False  # hosts.yaml's job is not the deployed one (deploytool)
    switch: SwitchView | None = None  # the last server swap for a stage, as the host carries it out
    # datasets whose records were made with other settings than the deployed job's (a new runner
    # of it is refused until they agree, or --force mixes them)
    settings_differ: list[str] = field(default_factory=list)
    settings_release: str | None = None  # the newest release on the host made with theirs

    def write(self, path) -> None:
        raise TypeError("a JobView is made for each look, never written: status.json is JobStatus")

    @property
    def state_label(self) -> str:
        """The job's state as a person is told it: a runner gone that the watcher, at work, starts
        again is a job recovering (`stopped` alone would read as the end, a restart to type); a
        runner in a stop's grace is stopping, one letting its answers in flight finish is draining
        (it writes `running` until its verdict, and `running` with an ETA reads as a job that goes
        on); a runner stopped or ended by a restart the host is carrying out is restarting
        (neither the watcher's recovery nor the end: a start follows); a runner killed that
        nothing starts again died (`stopped` reads as a stop someone typed)."""
        if self.switching:
            return SWITCHING
        if self.restarting and (self.terminal or self.stopping is not None or self.draining):
            return RESTARTING
        if self.terminal and self.state != JobState.FINISHED and not self.job_ended:
            return RECOVERING
        if self.state == JobState.STOPPED and self.message == GONE:  # no stop of anyone's
            return DIED
        if self.stopping is not None and not self.terminal:
            return STOPPING
        if self.draining and not self.terminal:
            return DRAINING
        return self.state

    @property
    def restarting(self) -> bool:
        """A restart on the host holds the job between its stop and its start (its process alive:
        one killed midway is not said)."""
        return self.supervision is not None and self.supervision.restarting

    @property
    def switching(self) -> bool:
        """A server swap for a stage under way: the runner of that stage comes once it has loaded."""
        sw = self.switch
        return sw is not None and not sw.ended and sw.alive

    @property
    def ending(self) -> bool:
        """Ended, in a stop's grace or draining: nothing new is sent, so no ETA is one to wait
        for."""
        return self.terminal or self.stopping is not None or self.draining

    def dataset_state_label(self, name: str) -> str:
        """A dataset's state as a person is told it: one --datasets leaves out is not run (its
        target is none, which would read as complete); one at work in a stop's grace, stopping."""
        if not Caps.from_dict(self.caps or {}).selected(name):
            return NOT_RUN
        label = self.datasets[name].state_label
        if label == DatasetState.RUNNING and self.ending and not self.terminal:
            return STOPPING
        return label

    @property
    def job_ended(self) -> bool:
        """Nothing more will come of it: its verdict, and no runner gone that the watcher, at work,
        keeps, and no stage asked to follow it that the watcher is starting or has yet to look at
        (its last look came before the verdict)."""
        if not self.terminal or self.switching or self.restarting:
            return False
        sup = self.supervision
        if sup is None or not sup.supervised:
            return True
        if self.state != JobState.FINISHED:
            return not (sup.runner and sup.runner.state in KEPT_STATES)
        if not self.follows:
            return True
        if sup.ticked_at is None:  # a watcher of an older release: it starts no next stage
            return True
        return not sup.next_stage and sup.ticked_at > (self.updated_at or 0.0)
