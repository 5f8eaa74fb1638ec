"""The job's tokens per second, one rule for every command: a runner's last minute while it runs,
else the job's mean over the time it ran (starred where a view shows it)."""

from __future__ import annotations

from remote.common.speed import job_rate


def test_the_last_minute_only_while_a_runner_runs_and_has_one_else_the_mean():
    assert job_rate("running", 900.0, 800.0) == (900.0, False)
    assert job_rate("running", 0.0, 800.0) == (800.0, True)  # nothing finished in the minute
    assert job_rate("running", 0.0, None) == (None, False)  # nothing made yet: not measured
    for ended in ("finished", "stopped", "failed", "starting"):
        assert job_rate(ended, 900.0, 800.0) == (800.0, True), ended  # the end's minute: no rate
        assert job_rate(ended, 900.0, None) == (None, False), ended


def test_a_datasets_row_is_its_mean_whatever_the_job_does_so_it_never_moves_by_itself():
    """B1 complete in a running job read its last minute's share (decaying as the minute slid by)
    and then a mean: now its mean, the same in every state; a stage with no mean (the hidden
    states' rows) still says its last minute while it runs."""
    from remote.common.speed import row_rate

    for state in ("running", "finished", "stopped", "starting"):
        assert row_rate(state, 900.0, 3_300.0) == (3_300.0, True), state
    assert row_rate("running", 11.5, None) == (11.5, False)
    assert row_rate("finished", 11.5, None) == (None, False)
