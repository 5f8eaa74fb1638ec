"""Tokens per second, said one way by status, tail, plan and report (the same fields of
status.json, so the commands give one figure for one job). A mean is a count of tokens over the
time their answers were being made (requests in flight: the runner's `rates.ActiveTime`, every
runner's). The job's: a runner's last minute while it runs and has one, else its mean. A dataset's
row: its mean, always (fixed once it is complete), so a row never moves while nothing happens."""

from __future__ import annotations

from .status import JobState

MEAN_TEXT = "the job's mean over the time its answers were being made"  # the job's starred rate


def mean_note(made: str = "answers") -> str:
    """What a starred rate is, wherever one is shown, and why the rows do not add up to the total;
    `made`: what the stage makes (answers, rows). Short: it is under every status."""
    guess = (
        "; a starred ETA, a guess at that mean until the runner has a minute of its own"
        if made == "answers"
        else ""
    )
    return (
        f"* a mean: tokens over the time their {made} were being made, every runner's (a "
        "dataset's row always, fixed once complete; the total once the job has ended or while its "
        "runner has no minute of its own); each row is its dataset's own speed on a shared server, "
        f"so the rows add up to more than the job's{guess}"
    )


def job_rate(state: str, last_minute: float, mean: float | None) -> tuple[float | None, bool]:
    """(tokens per second, whether it is the mean), for the job. The last minute's is a rate of a
    runner at work: once the job has ended it says only how its end went, and a runner writes 0
    until it has a minute of its own answers (its first comes an answer's length after its start).
    None: nothing to say."""
    if state == JobState.RUNNING and last_minute:
        return last_minute, False
    if mean:
        return mean, True
    return None, False  # nothing made yet, or a dataset just begun in a young runner: not measured


def eta_pace(streamed: float, last_minute: float, mean: float | None, young: bool) -> float:
    """Tokens per second an ETA is reckoned at: what streams (answers in flight included,
    measured within seconds of a start) where anything does; else the last minute's, or, while
    the runner is young (its window not yet full of answers), the job's mean where that is faster."""
    if streamed:
        return streamed
    return max(last_minute, mean or 0.0) if young else last_minute


def etas(
    left: dict[str, float], pace: float, floor: dict[str, float] | None = None
) -> dict[str, int | None]:
    """Each one's ETA, in the order given (datasets are made one after another, so what is left of
    those before counts in): its `left` and theirs at `pace` (one unit: tokens, or rows), never
    under its `floor` or theirs (the longest answer in flight, which no pace beats). None: no pace."""
    out: dict[str, int | None] = {}
    cum = low = 0.0
    for name, n in left.items():
        cum += n
        low = max(low, (floor or {}).get(name, 0.0))
        out[name] = int(max(cum / pace, low)) if pace > 0 else None
    return out


def row_rate(state: str, last_minute: float, mean: float | None) -> tuple[float | None, bool]:
    """A dataset's row: its mean where its stage keeps one (the answers, the hidden states' rows
    and the draft stage do); the last minute's only where none is kept (a runner of an older
    release)."""
    if mean:
        return mean, True
    return job_rate(state, last_minute, None)
