"""status.json from the runner's pieces: pure functions of what they hold (building a status changes
nothing, so it can be built as often as wanted)."""

from __future__ import annotations

from dataclasses import dataclass

from ...common.jobspec import JobSpec
from ...common.speed import eta_pace, etas
from ...common.status import DatasetState, DatasetStatus, JobState
from ..store.datasets import DatasetRun
from ..store.rates import RATE_WINDOW, ActiveTime, Streaming


def stalled(state: str, in_flight: int, last_completion: float, now: float, after: float) -> bool:
    """Requests are out and nothing has finished for `after` seconds."""
    return state == JobState.RUNNING and in_flight > 0 and now - last_completion > after


@dataclass
class Progress:
    datasets: dict[str, DatasetStatus]
    tokens_per_s: float  # 0 while the runner is young (see `progress`)
    samples_per_s: float
    remaining_tokens: float
    pace: float = 0.0  # tokens per second the ETAs are reckoned at (see `progress`)
    guess: bool = False  # the pace is the job's mean, not this runner's own
    tail_s: float = 0.0  # the longest an answer in flight needs at its own stream's speed

    @property
    def eta_s(self) -> int | None:
        pace = self.pace or self.tokens_per_s
        return int(max(self.remaining_tokens / pace, self.tail_s)) if pace > 0 else None

    def line(self) -> str:
        """done/target, tokens, ETA: what a notification says about the job."""
        done = sum(d.done for d in self.datasets.values())
        target = sum(d.target for d in self.datasets.values())
        tokens = sum(d.completion_tokens for d in self.datasets.values())
        eta = self.eta_s
        when = f"{eta // 3600}h{eta % 3600 // 60:02d}m" if eta else "-"
        return f"done {done:,}/{target:,}, {tokens:,} tokens, ETA {when}"


def set_etas(
    datasets: dict[str, DatasetStatus],
    left: dict[str, float],
    pace: float,
    tail_s: dict[str, float] | None = None,
) -> None:
    """Each dataset's ETA (`speed.etas`, in job order: the last one's is the job's): given wherever
    the job's is (a pace), none where it is not; 0 once complete. `tail_s`: the longest one of a
    dataset's answers in flight needs at its own stream's speed (the last long answer of a
    dataset streams alone)."""
    reckoned = etas({n: left.get(n, 0) for n in datasets}, pace, tail_s)
    for name, d in datasets.items():
        if d.state == DatasetState.COMPLETE:
            d.eta_s = 0
        elif reckoned[name] is not None:
            d.eta_s = reckoned[name]


def _row(
    run: DatasetRun, now: float, started: float, streaming: list[Streaming]
) -> tuple[DatasetStatus, float, float]:
    """The dataset's status, its rate over the last minute, and the seconds its longest answer in
    flight needs at its own speed."""
    spec = run.spec
    tok_rate = run.tokens.per_s(now, started)
    mean = run.mean_tokens
    state = run.state()
    expected = run.expected_tokens
    rem_tok = max(0, run.target_n - run.done_in_target) * expected
    # what the answers in flight have streamed is made already (up to what each is expected to be)
    rem_tok = max(0.0, rem_tok - sum(min(a.tokens, expected) for a in streaming))
    if run.budget is not None:
        rem_tok = min(rem_tok, max(0, run.budget - run.completion_tokens))
    if state == DatasetState.COMPLETE:
        rem_tok = 0
    row = DatasetStatus(
        state=state,
        done=run.done_in_target,
        target=run.target_n,
        records=len(run.done),
        prompts=len(run.prompts),
        completion_tokens=run.completion_tokens,
        mean_tokens=round(mean, 1),
        errors=run.errors,
        failed_this_run=len(run.failed),
        in_flight=len(run.in_flight),
        in_flight_beyond=run.in_flight_beyond,
        new_records=run.new_records,
        finish_length=run.finish_length,
        empty=run.empty,
        tokens_per_s=round(tok_rate, 1),
        samples_per_s=round(run.tokens.per_s(now, started, run.tokens.count(now)), 3),
        mean_tokens_per_s=run.active.per_s(now),
        budget=run.budget,
        budget_reached=run.budget_reached(),
        remaining_tokens=int(rem_tok),
        prompts_file=dict(run.prompts.identity, path=spec.prompts),
        prompts_changed=run.prompts_changed,
    )
    tail = max((a.left_s(expected) for a in streaming), default=0.0)
    return row, tok_rate, 0.0 if state == DatasetState.COMPLETE else tail


def progress(
    job: JobSpec,
    runs: dict[str, DatasetRun],
    now: float,
    started: float,
    ran: ActiveTime | None = None,
    first: float | None = None,
    streaming: dict[str, list[Streaming]] | None = None,
    streamed_per_s: float = 0.0,
) -> Progress:
    """Per dataset, in job order: where it stands; and the rates and ETAs over the whole job (datasets
    run one after another, so their ETAs accumulate). The rate counts finished answers, and a
    runner's first (`first`: when; None: none yet) comes an answer's length after its start: until
    its window has been full of answers its rate is young (a fraction of its speed): where the job
    has a mean (`ran`: every runner's) it is written as 0, so the views show the mean instead
    (`speed.job_rate`). The ETAs are reckoned at what streams (`streamed_per_s`: tokens as they
    come, answers in flight included, measured within seconds of a start, whatever the engine's
    speed now), what the answers in flight have made (`streaming`) taken off what is left; where
    nothing streams, at the last minute, or, while young, at the job's mean where that is the
    faster: a guess (a restart onto a slower engine is not seen until a minute has ended)."""
    datasets: dict[str, DatasetStatus] = {}
    tails: dict[str, float] = {}
    tok_rate = sample_rate = remaining = 0.0
    for spec in job.datasets:
        run = runs.get(spec.name)
        if run is None:
            continue
        row, rate, tails[spec.name] = _row(run, now, started, (streaming or {}).get(spec.name, []))
        datasets[spec.name] = row
        tok_rate += rate
        sample_rate += row.samples_per_s
        remaining += row.remaining_tokens
    mean = ran.per_s(now) if ran else None
    young = (first is None or now - first < RATE_WINDOW) and bool(mean)
    guess = young and not streamed_per_s and (mean or 0) > tok_rate
    pace = eta_pace(streamed_per_s, tok_rate, mean, young)
    for d in datasets.values() if young else ():
        d.tokens_per_s = 0.0
    set_etas(datasets, {n: d.remaining_tokens for n, d in datasets.items()}, pace, tails)
    shown = 0.0 if young else round(tok_rate, 1)
    tail = max(tails.values(), default=0.0)
    return Progress(datasets, shown, round(sample_rate, 3), remaining, pace, guess, tail)
