"""The hidden-states stage in its runner, in-process, against an engine that writes its files as vLLM's
connector does (a lock held while it writes, the name in the answer): a file still being written
is waited for, a bad one is asked again and never counted, every row is counted once."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import threading

from remote.common.caps import Caps
from remote.common.jobspec import JobSpec, Paths
from remote.common.stages import HIDDEN_STATES
from remote.common.status import JobState, JobStatus
from remote.job.engine.client import Engine, TransientError
from remote.job.hidden import hsfile
from remote.job.loop.runner import Runner
from tests.conftest import wait_for
from tests.helpers.runner_jobs import make_root, run


class Connector(Engine):
    """Each request's file is written half, then whole, while its lock is held (released a few
    loop turns after the answer); row `torn` gets a torn file once, row `busy` a 503 once."""

    base_urls = ["http://a"]
    model = "m"

    def __init__(self, torn: str, busy: str):
        self.torn, self.busy, self.asked = torn, busy, []

    async def hidden_states(self, url, input_ids, key, incoming):
        rid = key.rsplit("-", 2)[0]
        self.asked.append(rid)
        if rid == self.busy and self.asked.count(rid) == 1:
            raise TransientError("HTTP 503: busy")
        path = incoming / f"{key}.safetensors"
        fd = os.open(hsfile.lock_path(path), os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        hsfile.write(path, input_ids, bytes(len(input_ids) * 3 * 8 * 2), 3, "F16")
        whole = path.read_bytes()
        path.write_bytes(whole[: len(whole) // 2])  # the write is under way

        async def finish():
            for _ in range(5):
                await asyncio.sleep(0)
            if not (rid == self.torn and self.asked.count(rid) == 1):
                path.write_bytes(whole)
            os.close(fd)

        asyncio.ensure_future(finish())
        return path


def answered_root(tmp_path, datasets: dict, engine: dict):
    """A job whose answers the stand-in engine made, their token ids kept: the stage's input."""
    root = make_root(tmp_path, datasets, engine)
    job = json.loads((root / "job.json").read_text())
    job["extra_body"] = {"return_token_ids": True}
    (root / "job.json").write_text(json.dumps(job))
    assert run(root).returncode == 0
    return root


def test_rows_wait_for_their_file_and_a_bad_one_is_asked_again(tmp_path, monkeypatch):
    root = answered_root(tmp_path, {"B1": 6, "B2": 3}, {"kind": "simulate", "tokens_per_s": 1e6})
    fake = Connector(torn="B1-000002_gen0", busy="B2-000001_gen0")
    monkeypatch.setattr("remote.job.loop.runner.make_engine", lambda job, keys: fake)
    monkeypatch.setattr("remote.job.engine.client.backoff", lambda n, base: 0)
    paths = Paths(root)
    caps = Caps(caps={"B1": 4}, stage=HIDDEN_STATES)
    runner = Runner(paths, JobSpec.load(root / "job.json"), caps)
    runner.stage.prepare()
    assert runner.run() == 0 and runner.state == JobState.FINISHED
    assert runner.stage.redone == 1 and runner.stage.retries == 1
    for ds, n in (("B1", 4), ("B2", 3)):
        lines = [json.loads(x) for x in (paths.hidden_states / ds / "rows.jsonl").open()]
        assert sorted(x["id"] for x in lines) == [f"{ds}-{i:06d}_gen0" for i in range(n)]
        for x in lines:
            assert hsfile.check(
                paths.hidden_states / ds / "hidden_states" / f"hs_{x['n']}.safetensors",
                x["input_ids"],
                3,
            )
    assert not list((paths.hidden_states / ".incoming").iterdir())  # no file, no lock left
    status = json.loads(paths.status.read_text())
    assert status["stage"] == HIDDEN_STATES and status["datasets"]["B1"]["done"] == 4
    assert (
        status["datasets"]["B1"]["target"] == 4 and status["datasets"]["B2"]["state"] == "complete"
    )
    # each dataset says its own rate, as the total does (not 0 beside it)
    assert all(status["datasets"][ds]["tokens_per_s"] > 0 for ds in ("B1", "B2"))
    # a second run has nothing to do: every row is counted, none asked again
    fake.asked.clear()
    again = Runner(paths, JobSpec.load(root / "job.json"), caps)
    again.stage.prepare()
    assert again.run() == 0 and fake.asked == []


def test_new_caps_live_change_the_rows_to_make_and_a_stage_change_is_refused(tmp_path):
    import pytest

    root = answered_root(tmp_path, {"B1": 6}, {"kind": "simulate", "tokens_per_s": 1e6})
    runner = Runner(Paths(root), JobSpec.load(root / "job.json"), Caps(stage=HIDDEN_STATES))
    runner.stage.prepare()
    assert runner.stage.stages["B1"].target == 6
    runner.stage.flying.add("B1-000000_gen0")  # in flight: not queued a second time
    runner.stage.recap(Caps(caps={"B1": 2}, stage=HIDDEN_STATES))
    assert runner.stage.stages["B1"].target == 2 and [
        r.id for r in runner.stage.stages["B1"].todo
    ] == ["B1-000001_gen0"]
    # the runner only reads the job's caps: the command that started it is their one writer
    assert not Paths(root).caps.exists()
    with pytest.raises(ValueError, match="change of stage"):
        runner.stage.recap(Caps())


def answered(tmp_path):
    """A job whose 20 answers were made one at a time by the stand-in engine, token ids kept."""
    root = answered_root(
        tmp_path, {"B1": 20}, {"kind": "simulate", "tokens_per_s": 1e6, "concurrency": 1}
    )
    return root


def test_a_stage_that_cannot_fit_the_disk_stops_after_its_first_row_and_then_at_start(tmp_path):
    root = answered(tmp_path)
    spec, caps = JobSpec.load(root / "job.json"), Caps(stage=HIDDEN_STATES)

    def runner(free):
        r = Runner(Paths(root), spec, caps)
        r.stage.free_bytes = lambda: free
        r.stage.prepare()
        return r

    first = runner(free=10_000)  # a few rows' worth: the first row says what the rest needs
    assert first.run() == 1 and first.state == JobState.FAILED
    assert "the hidden states left need" in first.message and "9.8 KiB free" in first.message
    made = first.stage.stages["B1"].store.count
    assert 1 <= made < 20  # it stopped: the rest would not fit
    again = runner(free=10_000)  # the rows made say it at once: nothing more is asked
    assert again.run() == 1 and again.stage.stages["B1"].store.count == made
    done = runner(free=10**12)
    assert done.run() == 0 and done.stage.stages["B1"].store.count == 20


def test_a_forced_stage_pauses_before_the_disk_fills_and_goes_on_once_space_is_freed(tmp_path):
    root = answered(tmp_path)
    free = [3000]  # less than a row needs once the first one says what a token takes
    r = Runner(Paths(root), JobSpec.load(root / "job.json"), Caps(stage=HIDDEN_STATES), force=True)
    r.stage.free_bytes = lambda: free[0]
    r.stage.prepare()
    seen = []

    def pull_free():  # what a person does once the stage says the disk is full
        try:
            wait_for(lambda: r.stage.disk.full, what="the stage paused")
            wait_for(
                lambda: (JobStatus.read(Paths(root).status) or JobStatus()).disk.full,
                what="status saying the disk is full",
            )
            seen.append((r.stage.stages["B1"].store.count, r.state))
        finally:
            free[0] = 10**12  # space freed (pull --free): the stage goes on by itself

    helper = threading.Thread(target=pull_free, daemon=True)
    helper.start()
    assert r.run() == 0  # the runner's signal handlers want the main thread
    helper.join(30)
    # paused once the first row said what a token takes: only the rows begun before it were made
    ((count, state),) = seen
    assert 1 <= count <= 2 and state == JobState.RUNNING and r.stage.stages["B1"].store.count == 20
    log = Paths(root).log.read_text()
    assert "no new rows until there is space" in log and "disk has space again" in log


class Elsewhere(Engine):
    """A server whose connector writes outside the stage's folder (shared_storage_path not set)."""

    base_urls = ["http://a"]
    model = "m"

    def __init__(self, where):
        self.where = where

    async def hidden_states(self, url, input_ids, key, incoming):
        path = self.where / f"{key}.safetensors"
        hsfile.write(path, input_ids, bytes(len(input_ids) * 2 * 2), 1, "BF16")
        return path


def test_a_file_outside_the_stages_folder_is_never_moved_and_the_job_says_the_fix(
    tmp_path, monkeypatch
):
    root = answered_root(tmp_path, {"B1": 3}, {"kind": "simulate", "tokens_per_s": 1e6})
    theirs = tmp_path / "elsewhere"
    theirs.mkdir()
    monkeypatch.setattr("remote.job.loop.runner.make_engine", lambda job, keys: Elsewhere(theirs))
    runner = Runner(Paths(root), JobSpec.load(root / "job.json"), Caps(stage=HIDDEN_STATES))
    runner.stage.prepare()
    assert runner.run() == 1 and runner.state == JobState.FAILED
    assert "outside" in runner.message and "shared_storage_path" in runner.message
    assert len(list(theirs.iterdir())) >= 1  # left where the server put it
    assert runner.stage.stages["B1"].store.count == 0


class LateFile(Connector):
    """As Connector, and a file of a request a kill cut off lands in the folder meanwhile (the
    server writes it after its asker is gone)."""

    async def hidden_states(self, url, input_ids, key, incoming):
        if not self.asked:
            hsfile.write(incoming / "cut-off-0.safetensors", [1, 2], bytes(2 * 3 * 8 * 2), 3, "F16")
            (incoming / "cut-off-0.safetensors.lock").write_text("")
        return await super().hidden_states(url, input_ids, key, incoming)


def test_a_finished_stage_leaves_no_file_of_a_request_cut_off(tmp_path, monkeypatch):
    root = answered_root(tmp_path, {"B1": 3}, {"kind": "simulate", "tokens_per_s": 1e6})
    fake = LateFile(torn="", busy="")
    monkeypatch.setattr("remote.job.loop.runner.make_engine", lambda job, keys: fake)
    paths = Paths(root)
    runner = Runner(paths, JobSpec.load(root / "job.json"), Caps(stage=HIDDEN_STATES))
    runner.stage.prepare()
    assert runner.run() == 0 and runner.state == JobState.FINISHED
    assert runner.stage.stages["B1"].store.count == 3
    assert not list((paths.hidden_states / ".incoming").iterdir())  # the late file went too


def test_each_datasets_eta_is_given_where_the_jobs_is_at_the_same_pace(tmp_path):
    """status gave `?` for each dataset beside a total ETA of 0m09s: now each dataset's, in job
    order, the last one's the job's; none of them while the job has none."""
    root = answered_root(tmp_path, {"B1": 4, "B2": 6}, {"kind": "simulate", "tokens_per_s": 1e6})
    runner = Runner(Paths(root), JobSpec.load(root / "job.json"), Caps(stage=HIDDEN_STATES))
    runner.stage.prepare()
    runner.started_at = 0.0
    before = runner.stage.status(100.0)
    assert before["eta_s"] is None and {d.eta_s for d in before["datasets"].values()} == {None}
    for t in range(5):  # 5 rows made in the last minute: 1 row each 12 s
        runner.stage.rows_made.add(50.0 + t, 1)
    st = runner.stage.status(100.0)
    assert st["eta_s"] == int(10 / (5 / 60))
    assert [d.eta_s for d in st["datasets"].values()] == [int(4 / (5 / 60)), st["eta_s"]]


def test_the_stages_rate_over_its_life_is_every_runners_and_stays_once_it_is_done(tmp_path):
    """Its time and tokens are kept for the next runner (made.json, never overwritten by a status
    written before the stage has read it): a finished stage's status holds their mean, the
    dataset's and the job's, where it held none."""
    root = answered_root(tmp_path, {"B1": 3}, {"kind": "simulate", "tokens_per_s": 1e6})
    paths = Paths(root)
    paths.hidden_made.parent.mkdir(parents=True, exist_ok=True)
    paths.hidden_made.write_text(json.dumps({"": [10.0, 5000], "B1": [8.0, 4000]}))  # runs before
    runner = Runner(paths, JobSpec.load(root / "job.json"), Caps(stage=HIDDEN_STATES))
    runner.stage.status(0.0)  # as the runner writes one before the stage opens its datasets
    assert json.loads(paths.hidden_made.read_text())["B1"] == [8.0, 4000]
    runner.stage.prepare()
    assert runner.run() == 0 and runner.state == JobState.FINISHED
    tokens = sum(
        json.loads(x)["tokens"] for x in (paths.hidden_states / "B1" / "rows.jsonl").open()
    )
    made = json.loads(paths.hidden_made.read_text())
    assert made["B1"][1] == 4000 + tokens and made[""][1] == 5000 + tokens
    assert made["B1"][0] >= 8.0 and made[""][0] >= 10.0
    st = JobStatus.read(paths.status)
    assert st.datasets["B1"].mean_tokens_per_s == round(made["B1"][1] / made["B1"][0], 1)
    assert st.mean_tokens_per_s == round(made[""][1] / made[""][0], 1)
