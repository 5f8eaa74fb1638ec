"""run/history.jsonl: changed-only lines written, read back whole; starts reset; torn lines skipped."""

from __future__ import annotations

from remote.common.status import DatasetStatus, EndpointStatus, JobStatus
from remote.job.store import history
from remote.job.store.history import FULL_EVERY, History


def status(t: float, **done: tuple[int, int]) -> JobStatus:
    st = JobStatus(state="running", updated_at=t, tokens_per_s=12.34, in_flight=3)
    st.datasets = {n: DatasetStatus(done=d, completion_tokens=k) for n, (d, k) in done.items()}
    return st


def test_only_what_changed_is_written_and_reading_fills_it_back(tmp_path):
    path = tmp_path / "history.jsonl"
    h = History(path)
    h.start(100.0, pid=42)
    h.record(status(160.0, B1=(1, 10), B2=(0, 0)))
    h.record(status(220.0, B1=(2, 25), B2=(0, 0)))
    raw = path.read_text().splitlines()
    assert raw[0] == '{"t":100,"start":42}'
    assert '"ds":{"B1":[2,25]}' in raw[2]  # B2 did not change: not written again
    lines = history.read(path)
    assert lines[2].ds == {"B1": [2, 25], "B2": [0, 0]}  # read back whole
    assert (lines[2].tps, lines[2].fl, lines[2].t) == (12.3, 3, 220)


def test_every_so_often_a_full_line_and_a_start_forgets_the_past(tmp_path):
    path = tmp_path / "history.jsonl"
    h = History(path)
    for i in range(FULL_EVERY + 1):
        h.record(status(float(i), B1=(0, 0), B2=(i, i)))
    assert '"B1"' in path.read_text().splitlines()[FULL_EVERY]  # unchanged, but a full snapshot
    h.start(1000.0, pid=7)
    h.record(status(1001.0, B2=(1, 1)))
    assert history.read(path)[-1].ds == {"B2": [1, 1]}  # nothing carried over a start


def test_servers_up_torn_lines_and_no_file(tmp_path):
    path = tmp_path / "history.jsonl"
    st = status(5.0, B1=(1, 1))
    st.endpoints = [
        EndpointStatus(url="a", reachable=True),
        EndpointStatus(url="b", reachable=False),
    ]
    History(path).record(st)
    with open(path, "a") as f:
        f.write('{"t": 6, "ds": {"B1": 5}}\n')  # a line no release wrote: left out
        f.write('{"t": 6, "tps"')  # a crash mid-line
    lines = history.read(path)
    assert len(lines) == 1 and lines[0].up == "10"
    assert "B1" in history.active(path)  # a runner's start reads it: the odd line does not stop it
    assert history.read(tmp_path / "none.jsonl") == []


def test_lines_of_a_release_that_wrote_no_made_count_a_minute_where_tokens_grew(tmp_path):
    path = tmp_path / "history.jsonl"
    h = History(path)
    h.start(0.0, pid=1)
    h.record(status(0.0, B1=(0, 0), B2=(0, 0)))
    h.record(status(60.0, B1=(5, 600), B2=(0, 0)))  # B1 makes 600 tokens in a minute
    h.record(status(90.0, B1=(9, 900), B2=(1, 30)))  # the runner's last line, 30 s later
    h.record(status(400.0, B1=(9, 900), B2=(2, 60)))  # after a gap of 310 s: not counted
    h.start(4000.0, pid=2)  # an hour later, a runner with nothing to do
    h.record(status(4000.0, B1=(9, 900), B2=(2, 60)))
    h.record(status(4060.0, B1=(9, 900), B2=(2, 60)))
    got = {n: (a.seconds, a.tokens, a.per_s(0.0)) for n, a in history.active(path).items()}
    assert got == {"B1": (90.0, 900, 10.0), "B2": (30.0, 30, 1.0), "": (90.0, 930, 10.3)}
    assert history.active(tmp_path / "none.jsonl") == {}


def test_the_next_runner_starts_from_the_last_made_so_a_complete_dataset_keeps_its_rate(tmp_path):
    """B1 complete (20,230 tokens made in 1.93 s of requests in flight) read 10.5k where it ran, and
    after a restart the history's minute between two lines made it 413: now the runner writes its
    time and the next starts from it, to the millisecond."""
    from remote.job.store.rates import ActiveTime

    path = tmp_path / "history.jsonl"
    h = History(path)
    h.start(0.0, pid=1)
    b1, job = ActiveTime(), ActiveTime()
    for a in (b1, job):
        a.sent(10.0)
        a.add(20_230)
        a.ended(11.93)
    h.record(status(60.0, B1=(12, 20_230)), {"B1": b1, "": job})
    h.record(status(70.0, B1=(12, 20_230)), {"B1": b1, "": job})  # unchanged: not written again
    assert '"made"' not in path.read_text().splitlines()[-1]
    h.start(100.0, pid=2)
    before = history.active(path)
    assert before["B1"].per_s(0.0) == b1.per_s(500.0) == round(20_230 / 1.93, 1)
    again = ActiveTime().plus(before["B1"])  # the second runner: B1 has nothing to do
    h.record(status(160.0, B1=(12, 20_230), B2=(3, 900)), {"B1": again, "": job})
    h.start(200.0, pid=3)  # a third runner only of B2: B1's last `made` carries over
    h.record(status(260.0, B2=(3, 900)), {"": job})
    assert history.active(path)["B1"].per_s(0.0) == round(20_230 / 1.93, 1)
