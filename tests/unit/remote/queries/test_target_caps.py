"""`plan`: caps from a token target, at the mean length measured once there are enough records (the
job's est_tokens before), with what is done and left among the target's prompts."""

from __future__ import annotations

import pytest

from remote.common.jobspec import JobSpec, Paths
from remote.common.protocol import CtlPlan
from remote.common.wire import HostFault
from remote.job.store.outputs import encode_record
from remote.queries.target_caps import MIN_MEASURED, answer, cap_for, plan
from tests.conftest import write_prompts


def host(tmp_path, records: int, tokens: int = 400):
    paths = Paths(tmp_path)
    write_prompts(paths.root / "data" / "B1.jsonl", 200, "B1")
    write_prompts(paths.root / "data" / "B2.jsonl", 10, "B2")
    paths.outputs.mkdir(parents=True)
    with open(paths.output("B1"), "wb") as f:
        for i in range(records):
            rec = {"id": f"B1-{i:06d}", "dataset": "B1", "index": i, "finish_reason": "stop"}
            f.write(encode_record(dict(rec, usage={"completion_tokens": tokens})))
    job = JobSpec.from_dict(
        {
            "datasets": {
                "B1": {"prompts": "data/B1.jsonl", "est_tokens": 1000},
                "B2": {"prompts": "data/B2.jsonl", "est_tokens": 500},
            }
        }
    )
    return paths, job


def test_the_cap_never_goes_over_the_target():
    assert cap_for(10_000, 300.0) == 33 and cap_for(10, 0.0) == 10


def test_measured_once_there_are_enough_records_est_tokens_before(tmp_path):
    paths, job = host(tmp_path, records=MIN_MEASURED)
    rows, targets = plan(paths, job, tokens_per_dataset=40_000)
    b1, b2 = rows["B1"], rows["B2"]
    assert (b1["mean_tokens"], b1["source"]) == (400.0, f"measured mean of {MIN_MEASURED} records")
    assert (b1["cap"], b1["target"], b1["done"], b1["todo"]) == (100, 100, 50, 50)
    assert b1["tokens_todo"] == 50 * 400 and b1["tokens_done"] == 50 * 400
    assert (b2["source"], b2["cap"], b2["target"]) == ("est_tokens (no records yet)", 80, 10)
    assert len(targets["B1"].ids) == 100 and len(targets["B2"].ids) == 10  # the planned caps
    assert list(plan(paths, job, 40_000, datasets=["B2"])[0]) == ["B2"]


def test_too_few_records_and_a_bad_target(tmp_path):
    paths, job = host(tmp_path, records=MIN_MEASURED - 1)
    b1 = plan(paths, job, 10_000)[0]["B1"]
    assert b1["mean_tokens"] == 1000.0  # the mean it passed over is said beside it
    assert b1["source"] == f"est_tokens (49 records, mean 400: {MIN_MEASURED} needed to use it)"
    with pytest.raises(HostFault, match="must be positive"):
        answer(paths, CtlPlan(tokens_per_dataset=0))


def test_plan_rates_the_answers_while_the_job_runs_and_by_its_mean_after():
    from remote.common.status import JobStatus
    from remote.queries.target_caps import answer_rate

    running = JobStatus(state="running", tokens_per_s=900.0, mean_tokens_per_s=800.0)
    assert answer_rate(running) == (900.0, "measured (last minute)")
    done = JobStatus(state="finished", tokens_per_s=0.0, mean_tokens_per_s=800.0)
    assert answer_rate(done) == (800.0, "the job's mean over the time its answers were being made")
    assert answer_rate(JobStatus(state="finished")) == (None, "")  # nothing made long enough
    stage = JobStatus(state="running", stage="hidden-states", tokens_per_s=5e5)
    assert answer_rate(stage) == (None, "")  # tokens of rows, not answers


def test_a_plan_for_the_targets_the_runner_runs_to_gives_the_etas_status_gives(tmp_path):
    """plan's ETA was its own (the records missing × the mean, at the last minute's rate, what is
    in flight left out): 0m47s beside status's 2m01s at the same moment. A dataset planned to the
    target it runs to now has what status says is left, at status's pace, and its ETA is never
    sooner than status's (the longest answer in flight)."""
    import time

    from remote.common.answers import PlanRow, plan_etas
    from remote.common.status import DatasetStatus, JobStatus, KeptStatus
    from remote.queries.target_caps import answer_rate

    paths, job = host(tmp_path, records=MIN_MEASURED)  # B1 plans to 100 at 400, B2 to all 10
    st = JobStatus(state="running", updated_at=time.time(), tokens_per_s=450.0)
    st.kept = KeptStatus(streamed_per_s=500.0)  # status's ETAs are reckoned at what streams
    st.datasets = {  # as the runner writes them: B2's last answer in flight needs 45 s
        "B1": DatasetStatus(
            state="running", done=50, target=100, remaining_tokens=15_000, eta_s=30
        ),
        "B2": DatasetStatus(state="pending", done=0, target=10, remaining_tokens=5_000, eta_s=45),
    }
    rows, _ = plan(paths, job, tokens_per_dataset=40_000, now=st)
    assert (rows["B1"]["tokens_todo"], rows["B2"]["tokens_todo"]) == (15_000, 5_000)
    rate, basis = answer_rate(st)
    assert (rate, basis) == (500.0, "what streams now, as status's ETA")
    planned = {n: PlanRow(**r) for n, r in rows.items()}
    plan_etas(planned, rate, st)
    assert {n: r.eta_s for n, r in planned.items()} == {"B1": 30, "B2": 45}

    rows, _ = plan(paths, job, tokens_per_dataset=20_000, now=st)  # B1 to 50: done, B2 sooner
    planned = {n: PlanRow(**r) for n, r in rows.items()}
    plan_etas(planned, rate, st)
    assert (planned["B1"].todo, planned["B1"].eta_s, planned["B2"].eta_s) == (0, 0, 10)


def test_a_young_mean_above_est_tokens_is_the_runners_estimate_and_said_so(tmp_path):
    """The runner reckons a record to make at est_tokens, or at the young mean where that is
    higher (short answers end first): plan reckons it the same way, and says which."""
    paths, job = host(tmp_path, records=10, tokens=1500)  # B1's est_tokens is 1000
    b1 = plan(paths, job, 30_000)[0]["B1"]
    assert (b1["mean_tokens"], b1["cap"]) == (1500.0, 20)
    assert b1["source"] == (
        f"mean of 10 records, above est_tokens ({MIN_MEASURED} needed to use a lower one)"
    )
