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
