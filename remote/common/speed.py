"""The job's tokens per second, said one way by status, tail, plan and report: a runner's last
minute while it runs and has one, else the job's mean over the time its runners made tokens (the
same fields of status.json, so the commands give one figure for one job)."""

from __future__ import annotations

from .status import JobState

MEAN_SAID = "the job's mean over the time it ran"  # what a starred rate is, wherever it is said


def rate_said(state: str, last_minute: float, mean: float | None) -> tuple[float | None, bool]:
    """(tokens per second, whether it is the mean), for the job or one dataset's row. The last
    minute's is a rate of a runner at work: once the job has ended it says only how its end went,
    and a runner writes 0 until it has a minute of its own answers (its first comes an answer's
    length after its start). None: nothing to say."""
    if state == JobState.RUNNING and last_minute:
        return last_minute, False
    if mean:
        return mean, True
    return None, False  # nothing made yet, or a dataset just begun in a young runner: not measured
