"""The host's state files (remote/common/state.py): one atomic write, one tolerant codec, the typed
records of run/, readable by another release."""

import json
import stat
import subprocess
import sys

from remote.common.jobspec import ServerSpec
from remote.common.state import (
    ControlRequest,
    EngineProcess,
    RunnerRecord,
    ServerRecord,
    ServerWanted,
    Supervise,
)


def test_records_read_back_what_another_release_wrote(tmp_path):
    path = tmp_path / "server.pid"
    newer = {"pid": 7, "start_time": 9, "port": 8000, "gpu_uuid": "x", "engines": [{"pid": 8}]}
    path.write_text(json.dumps(newer))
    rec = ServerRecord.read(path)
    assert rec.pid == 7 and rec.port == 8000 and rec.engines == [EngineProcess(pid=8)]
    assert rec.session == 7 and rec.ready_at is None  # before `sid` was kept: a session leader
    (tmp_path / "bad.pid").write_text(json.dumps({"pid": "7"}))
    assert RunnerRecord.read(tmp_path / "bad.pid") is None  # damaged: as if there were none
    assert RunnerRecord.read(tmp_path / "missing.pid") is None


def test_an_unset_field_is_left_out_as_older_readers_expect():
    # an older watcher takes a present `stopped_at` for a stop
    assert ControlRequest(seq=2, token="t", grace=5.0).to_dict() == {
        "seq": 2,
        "token": "t",
        "recap": False,
        "drain": False,
        "grace": 5.0,
    }
    assert "stopped_at" not in ServerRecord(pid=1).to_dict()


def test_supervise_round_trips_the_servers_settings_typed(tmp_path):
    spec = ServerSpec(model="m", port=8011, args=("--served-model-name", "tiny"), env={"K": "v"})
    s = Supervise(server=ServerWanted(wanted=True, spec=spec))
    s.write(tmp_path / "supervise.json")
    back = Supervise.read(tmp_path / "supervise.json")
    assert back.server.spec == spec and back.watched("server") and not back.watched("runner")
    assert stat.S_IMODE((tmp_path / "supervise.json").stat().st_mode) == 0o600


def test_a_process_record_is_alive_only_while_its_process_is_the_one_it_names():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        from remote.common import procinfo

        rec = RunnerRecord(pid=p.pid, start_time=procinfo.start_time(p.pid))
        assert rec.alive()
        assert not RunnerRecord(pid=p.pid, start_time=(rec.start_time or 0) + 1).alive()  # reused
    finally:
        p.kill()
        p.wait()
    assert not rec.alive()


def test_a_starting_watcher_holds_its_lock_before_its_python_runs(tmp_path):
    """The starter takes the lock and hands it over open: while the new watcher is still starting
    (here: a stand-in that waits for a file), the lock is held, a second start starts nothing, and
    the lock goes with the watcher's exit."""
    from remote.common.jobspec import Paths
    from remote.common.state import WATCH_LOCK_FD_ENV, lock_held, start_watcher

    paths, go = Paths(tmp_path / "root"), tmp_path / "go"
    fake = tmp_path / "python"
    fake.write_text(
        f'#!/bin/sh\necho "fd=${WATCH_LOCK_FD_ENV}"\nwhile [ ! -e {go} ]; do sleep 0.01; done\n'
    )
    fake.chmod(0o755)
    proc = start_watcher(paths, str(fake), tmp_path)
    try:
        assert proc is not None and lock_held(paths.watcher_lock)
        assert start_watcher(paths, str(fake), tmp_path) is None  # one watcher, never two
    finally:
        go.touch()
        proc.wait(timeout=60)
    assert not lock_held(paths.watcher_lock)
    assert "fd=" in paths.watcher_log.read_text() and "fd=\n" not in paths.watcher_log.read_text()


def test_the_watcher_keeps_the_lock_it_was_handed_and_refuses_a_held_one(tmp_path, monkeypatch):
    import fcntl
    import os

    from remote.common.jobspec import Paths
    from remote.common.state import WATCH_LOCK_FD_ENV, take_watcher_lock

    paths = Paths(tmp_path)
    paths.ensure()
    fd = os.open(paths.watcher_lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert take_watcher_lock(paths) is None  # held by another: a second watcher exits
        monkeypatch.setenv(WATCH_LOCK_FD_ENV, str(fd))
        assert take_watcher_lock(paths) == fd  # handed over: kept
        assert WATCH_LOCK_FD_ENV not in os.environ  # not passed on to what the watcher starts
    finally:
        os.close(fd)
    mine = take_watcher_lock(paths)  # started by hand or by systemd: taken now
    assert mine is not None
    os.close(mine)
    monkeypatch.setenv(WATCH_LOCK_FD_ENV, "987")  # a stray variable, no such open file
    mine = take_watcher_lock(paths)
    assert mine is not None and mine != 987
    os.close(mine)


def test_a_prompt_file_under_line_number_ids_may_grow_at_its_end_only(tmp_path):
    from remote.common.jobspec import Paths
    from remote.common.state import LineIds, line_ids_moved

    paths = Paths(tmp_path)
    prompts = tmp_path / "B1.jsonl"
    prompts.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    paths.line_ids.mkdir(parents=True)
    LineIds.of(prompts).write(paths.line_ids / "B1.json")
    assert not line_ids_moved(paths, "B1", prompts)  # no records: nothing to name wrong
    paths.outputs.mkdir(parents=True)
    paths.output("B1").write_text('{"id": "B1-000000"}\n')
    assert not line_ids_moved(paths, "B1", prompts)
    prompts.write_text(prompts.read_text() + '{"prompt": "c"}\n')  # appended
    assert not line_ids_moved(paths, "B1", prompts)
    prompts.write_text('{"prompt": "new"}\n' + prompts.read_text())  # one put at the top
    assert line_ids_moved(paths, "B1", prompts)
    prompts.write_text('{"prompt": "a"}\n')  # shorter
    assert line_ids_moved(paths, "B1", prompts)
    # ids given since help nothing: they may be the old records' very names, for other prompts
    prompts.write_text('{"id": "B1-000000", "prompt": "new"}\n{"id": "B1-000001", "prompt": "a"}\n')
    assert line_ids_moved(paths, "B1", prompts)
    assert not line_ids_moved(paths, "B2", prompts)  # nothing kept of B2


def test_the_refusal_names_a_cut_as_well_as_a_rewrite():
    """A file cut at its end was refused as `rewritten`: the prompts left keep their names, but
    records past the cut would name prompts added there later."""
    from remote.common.state import moved_text

    text = moved_text(["B1"], ["data/prompts/B1.jsonl"])
    assert "B1: data/prompts/B1.jsonl was rewritten or cut, not only appended to" in text
    assert "past a cut, the prompts added there later" in text
