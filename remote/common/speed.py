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
    `made`: what the stage makes (answers, rows)."""
    return (
        f"* tokens over the time their {made} were being made, every runner's: a dataset's always "
        "(fixed once it is complete), the job's once it has ended or while its runner has not a "
        f"minute of its own {made} yet or finished nothing in the last one (else its last "
        "minute's). Each row is that dataset's own speed, not a share of the total: datasets are "
        "made side by side (at a hand-over, or several at once) on the same server, so the rows "
        "add up to more than the job's. A starred ETA is reckoned at the job's mean: a guess until "
        "its runner has a minute of its own"
        + (
            " (none where they stream: the ETA is then reckoned at what streams)"
            if made == "answers"
            else ""
        )
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


def row_rate(state: str, last_minute: float, mean: float | None) -> tuple[float | None, bool]:
    """A dataset's row: its mean where its stage keeps one (the answers, the hidden states' rows
    and the draft stage do); the last minute's only where none is kept (a runner of an older
    release)."""
    if mean:
        return mean, True
    return job_rate(state, last_minute, None)
