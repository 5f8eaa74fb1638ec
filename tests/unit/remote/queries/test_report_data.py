"""The report's tokens-per-second series, measured from the records (remote/queries/report_data.py)."""

import collections
import json

from remote.common.caps import Target
from remote.queries.report_data import _created, scan_outputs, throughput


def test_created_is_read_from_the_line_end_past_a_prompt_that_names_it():
    rec = {
        "id": "B1-0",
        "finish_reason": "stop",
        "usage": {"prompt_tokens": 3, "completion_tokens": 7},
        "conversations": [{"role": "user", "content": '"created": 5', "created": 6}],
        "created": 1_764_500_123,
        "token_ids": [1, 2, 3],
    }
    assert _created(json.dumps(rec).encode()) == 1_764_500_123


def test_a_job_of_half_a_minute_has_a_line_and_an_average(tmp_path):
    path = tmp_path / "B1.jsonl"
    with open(path, "w") as f:
        for i in range(30):  # 100 tokens a second for 30 s
            usage = {"prompt_tokens": 1, "completion_tokens": 100}
            rec = {"id": i, "finish_reason": "stop", "usage": usage, "conversations": []}
            f.write(json.dumps({**rec, "created": 1_000 + i}) + "\n")
    made = collections.Counter()
    got = scan_outputs(path, Target(), made)
    assert got.lengths == [100] * 30 and got.finish == {"stop": 30}
    points, mean = throughput(made)
    width = points[1][0] - points[0][0]
    assert width == 1.0 and len(points) == 31  # 30 s in 1 s bins (and the edge of the last)
    assert points[0] == [1_000.5, 100.0] and mean == 100.0


def test_nothing_written_has_no_series():
    assert throughput(collections.Counter()) == ([], None)


def test_a_long_job_is_drawn_in_sixty_points_that_add_up():
    made = collections.Counter({t: 10 for t in range(0, 20 * 3600, 7)})
    points, mean = throughput(made)
    width = points[1][0] - points[0][0]
    assert 60 <= len(points) <= 61 and abs(width - (max(made) + 1) / 60) < 1e-6
    assert abs(sum(p[1] for p in points) * width - sum(made.values())) < 1e-6


def test_the_average_is_over_the_time_the_job_ran_and_idle_time_is_a_gap():
    # 60 s at 1,000 tok/s, nothing for 19 minutes (stopped), then 60 s more at 1,000 tok/s
    made = collections.Counter({t: 1_000 for t in [*range(0, 60), *range(1_200, 1_260)]})
    points, mean = throughput(made)
    width = points[1][0] - points[0][0]
    assert abs(mean - 1_000 * 120 / 119) < 1  # not 120k tokens over 21 minutes (95 tok/s)
    gaps = [p for p in points if p[1] is None]
    assert gaps and all(60 < p[0] < 1_200 for p in gaps)  # only inside the idle stretch
    assert abs(sum(p[1] for p in points if p[1] is not None) * width - sum(made.values())) < 1e-6


def test_while_the_stage_runs_the_answers_table_has_the_generations_cap_not_the_stages_rows(
    tmp_path,
):
    from remote.common.caps import Caps
    from remote.common.jobspec import Paths
    from remote.common.stages import HIDDEN_STATES
    from remote.common.status import DatasetStatus, JobStatus
    from remote.queries.report_data import gather

    paths = Paths(tmp_path)
    paths.ensure()
    st = JobStatus(stage=HIDDEN_STATES, caps=Caps(max_samples=5, stage=HIDDEN_STATES).to_dict())
    Caps(max_samples=5, stage=HIDDEN_STATES).write(paths.caps)  # the job's, as the host keeps them
    st.datasets["B1"] = DatasetStatus(target=9, budget=123)  # the stage's: rows of two turns
    paths.status.write_text(json.dumps(st.to_dict()))
    got = gather(paths)
    assert got.datasets["B1"].target == 5 and got.stage == {}
    st.stage, st.caps = "generate", Caps(max_samples=5).to_dict()
    paths.status.write_text(json.dumps(st.to_dict()))
    assert gather(paths).datasets["B1"].target == 9


def test_records_beyond_the_cap_are_counted_apart(tmp_path):
    """A cap lowered after its records were made: the report's counts are those of the first N
    prompts' records, the rest counted apart (the engine made them all: the rate has them)."""
    path = tmp_path / "B2.jsonl"
    with open(path, "w") as f:
        for i in range(8):
            head = {
                "id": f"p{i}",
                "dataset": "B2",
                "index": i,
                "finish_reason": "length" if i > 4 else "stop",
            }
            usage = {"prompt_tokens": 1, "completion_tokens": 10 + i}
            f.write(
                json.dumps({**head, "usage": usage, "conversations": [], "created": 1_000}) + "\n"
            )
    made = collections.Counter()
    got = scan_outputs(path, Target(5), made)
    assert got.lengths == [10, 11, 12, 13, 14] and got.finish == {"stop": 5} and got.beyond == 3
    assert made == {1_000: sum(range(10, 18))}
    # the prompt file as it is now decides, as the runner counts: p1 moved past the cap, p7 into it
    now = Target(5, frozenset({"p0", "p2", "p3", "p4", "p7"}))
    got = scan_outputs(path, now, collections.Counter())
    assert got.lengths == [10, 12, 13, 14, 17] and got.beyond == 3
    with open(path, "a") as f:  # p0 written again (a kill between a write and its index)
        f.write(
            json.dumps(
                {
                    "id": "p0",
                    "dataset": "B2",
                    "index": 0,
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 99},
                }
            )
            + "\n"
        )
    again = scan_outputs(path, now, collections.Counter())
    assert again.lengths == got.lengths and again.beyond == got.beyond  # its first, once


def test_the_watchers_events_are_read_back_as_it_wrote_them_and_a_line_no_release_wrote_is_left_out(
    tmp_path,
):
    from remote.common.jobspec import Paths
    from remote.host.watcher.keepers import record_event
    from remote.queries.report_data import gather

    paths = Paths(tmp_path)
    paths.ensure()
    record_event(paths, "runner", "died", "exit -9")
    with open(paths.recover_log, "a") as f:  # a hand-edited line: its why is no text
        f.write(json.dumps({"at": 1.0, "what": "runner", "event": "died", "why": 9}) + "\n")
    record_event(paths, "server", "gave_up", "exit 1", ["CUDA out of memory"])
    got = [(e.what, e.event, e.why, e.log) for e in gather(paths).restarts]
    assert got == [
        ("runner", "died", "exit -9", None),
        ("server", "gave_up", "exit 1", ["CUDA out of memory"]),
    ]


def test_a_runner_killed_without_its_verdict_is_reported_stopped_as_status_says_it(tmp_path):
    """report and plan see the job as status does: a status file that still says running, its
    runner gone, is a stopped job, not one running at its last rate."""
    import os

    from remote.common import procinfo
    from remote.common.jobspec import Paths
    from remote.common.state import RunnerRecord
    from remote.common.status import JobStatus
    from remote.queries.report_data import gather

    paths = Paths(tmp_path)
    paths.ensure()
    JobStatus(state="running", pid=4242, tokens_per_s=900.0).write(paths.status)
    got = gather(paths).status
    assert got.state == "stopped" and "killed?" in got.message
    me = os.getpid()  # a live runner: the file stands as it is
    RunnerRecord(pid=me, start_time=procinfo.start_time(me), token="t").write(paths.pidfile)
    assert gather(paths).status.state == "running"


def test_a_cap_past_its_files_end_reads_as_every_prompt_where_the_status_counts_no_answers(
    tmp_path, monkeypatch
):
    """The stage's status counts rows: the answers' target is the cap over the file as it is now
    (a cap of 75 over 32 prompts read 75)."""
    from remote.common.caps import Caps
    from remote.common.jobspec import JobSpec, Paths
    from remote.common.stages import HIDDEN_STATES
    from remote.common.status import JobStatus
    from remote.queries import report_data
    from tests.conftest import write_prompts

    paths = Paths(tmp_path)
    paths.ensure()
    write_prompts(tmp_path / "data" / "B4.jsonl", 32, "B4")
    job = JobSpec.from_dict({"datasets": {"B4": {"prompts": "data/B4.jsonl", "est_tokens": 10}}})
    monkeypatch.setattr(report_data, "deployed_spec", lambda: job)
    Caps(max_samples=75, stage=HIDDEN_STATES).write(paths.caps)
    paths.status.write_text(json.dumps(JobStatus(stage=HIDDEN_STATES).to_dict()))
    assert report_data.gather(paths).datasets["B4"].target == 32


def test_the_hidden_states_stages_mean_is_the_one_status_gives(tmp_path):
    """The report said 79.9k tok/s where status and tail said 99.7k*: it divided by the whole
    seconds its rows were written in; status, by the time a row was being made (made.json)."""
    import json

    from remote.common.jobspec import Paths
    from remote.queries.report_data import stage_mean

    paths = Paths(tmp_path)
    assert stage_mean(paths) is None  # no stage yet: the rows' own times say it
    paths.hidden_made.parent.mkdir(parents=True)
    paths.hidden_made.write_text(json.dumps({"": [7.211, 718970], "B1": [0.417, 13758]}))
    assert stage_mean(paths) == round(718970 / 7.211, 1)
