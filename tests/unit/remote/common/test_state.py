"""The host's state files (remote/common/state.py): one atomic write, one tolerant codec, the typed
records of run/, readable by another release."""

import json
import os
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
    write_atomic,
)


def test_an_atomic_write_leaves_the_whole_file_its_mode_and_no_temp(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "supervise.json"
    path.write_text("old")
    write_atomic(path, b"new", mode=0o600)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(run) == ["supervise.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "kept.jsonl"
    path.write_bytes(b"old\n")

    def lines():
        yield b"half"
        raise OSError("disk full")

    try:
        write_atomic(path, lines())
    except OSError:
        pass
    assert path.read_bytes() == b"old\n" and os.listdir(run) == ["kept.jsonl"]


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
    # an older runner takes `"caps" in request` for a re-cap, an older watcher takes a present
    # `stopped_at` for a stop
    assert ControlRequest(seq=2, token="t", grace=5.0).to_dict() == {
        "seq": 2,
        "token": "t",
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
