"""The server's mechanism, piece by piece: which `vllm` runs and with what, secrets masked, what
/v1/models says (a real HTTP server on 127.0.0.1), a check that waits for a loading server (on an
injected clock), a stop told from a death, the wait for GPU memory to be freed (nvidia-smi read
through a stand-in)."""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from remote.common import procinfo
from remote.common.jobspec import Paths, ServerSpec
from remote.common.protocol import ServerCheck
from remote.common.state import ServerRecord
from remote.host.processes import server_process
from remote.host.processes.server_process import (
    ServerError,
    build_argv,
    masked,
    resolve_command,
    served_models,
    wait_gpu_free,
)


def test_the_command_is_the_one_asked_for_or_the_vllm_beside_python(tmp_path, monkeypatch):
    tool = tmp_path / "my-vllm"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert resolve_command(ServerSpec(command=str(tool))) == str(tool)
    with pytest.raises(ServerError, match="server.command 'no-such-vllm' not found"):
        resolve_command(ServerSpec(command="no-such-vllm"))
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "vllm").write_text("")
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    assert resolve_command(ServerSpec()) == str(venv / "vllm")
    spec = ServerSpec(model="/models/k2", port=8123, args=("--tensor-parallel-size", "8"))
    assert build_argv(spec)[1:] == [
        "serve",
        "/models/k2",
        "--port",
        "8123",
        "--host",
        "127.0.0.1",  # loopback unless asked: vLLM alone listens on every interface
        "--tensor-parallel-size",
        "8",
    ]
    asked = ServerSpec(args=("--host", "0.0.0.0"), env={"VLLM_API_KEY": "k"})
    assert build_argv(asked).count("--host") == 1 and "127.0.0.1" not in build_argv(asked)
    assert "--host" not in build_argv(ServerSpec(headless=True))  # a rank serves no HTTP


def test_beyond_loopback_without_a_key_is_refused_before_anything_starts(tmp_path):
    paths = Paths(tmp_path)
    with pytest.raises(ServerError, match="listens on 0.0.0.0 .* asks no API key"):
        server_process.start(paths, ServerSpec(command="/bin/true", args=("--host", "0.0.0.0")))
    assert not paths.server_pid.exists() and not paths.server_log.exists()


def test_no_vllm_anywhere_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerError, match="no `vllm` beside .* or on PATH"):
        resolve_command(ServerSpec())


def test_secrets_are_masked_and_the_rest_kept():
    env = {"VLLM_API_KEY": "k", "HF_TOKEN": "t", "DB_PASSWORD": "p", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert masked(env) == {
        "VLLM_API_KEY": "****",
        "HF_TOKEN": "****",
        "DB_PASSWORD": "****",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }


class Models(BaseHTTPRequestHandler):
    body = json.dumps({"data": [{"id": "kimi"}, {"id": 3}, "junk"]}).encode()

    def do_GET(self):
        code = 200 if self.path == "/v1/models" else 404
        self.send_response(code)
        self.end_headers()
        self.wfile.write(self.body if code == 200 else b"")

    def log_message(self, *a):
        pass


def test_the_models_a_server_serves_and_a_port_where_nothing_answers():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        assert served_models(srv.server_port) == (200, ["kimi"])
        assert server_process.get_url(f"http://127.0.0.1:{srv.server_port}/nope")[0] == 404
    finally:
        srv.shutdown()
        srv.server_close()
    assert served_models(srv.server_port) == (0, [])


class Clock:
    def __init__(self):
        self.t, self.slept = 0.0, []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_a_waiting_check_looks_again_until_the_server_answers_dies_or_its_wait_is_over(
    tmp_path, monkeypatch
):
    paths = Paths(tmp_path)
    paths.ensure()
    me = ServerRecord(pid=os.getpid(), start_time=procinfo.start_time(os.getpid()), port=1)
    me.write(paths.server_pid)  # alive: this process
    paths.server_log.write_text("".join(f"line {i}\n" for i in range(40)))
    answers = iter([(0, []), (503, []), (200, ["kimi"])])  # refused, loading, ready
    monkeypatch.setattr(server_process, "served_models", lambda port, key=None: next(answers))
    monkeypatch.setattr(server_process.engines, "watch", lambda paths, rec: rec)
    clock = Clock()
    c = server_process.check(paths, ServerCheck(wait_s=15), clock=clock.now, sleep=clock.sleep)
    assert c.ready and c.models == ["kimi"] and clock.slept == [0.25, 0.25]
    # never ready: the last look once wait_s is over; without wait_s, one look
    monkeypatch.setattr(server_process, "served_models", lambda port, key=None: (0, []))
    clock = Clock()
    c = server_process.check(paths, ServerCheck(wait_s=1), clock=clock.now, sleep=clock.sleep)
    assert c.alive and not c.ready and clock.slept == [0.25] * 4
    assert c.log == ["line 39"]  # alive: the log's last line
    clock = Clock()
    c = server_process.check(paths, ServerCheck(), clock=clock.now, sleep=clock.sleep)
    assert c.alive and not c.ready and clock.slept == []
    # a dead server, or none started, is answered at once
    ServerRecord(pid=os.getpid(), start_time=1, port=1).write(paths.server_pid)  # not this one
    c = server_process.check(paths, ServerCheck(wait_s=15), clock=clock.now, sleep=clock.sleep)
    assert c.started and not c.alive and clock.slept == []
    assert c.log == [f"line {i}" for i in range(10, 40)]  # dead: the last 30 lines say why
    paths.server_pid.unlink()
    c = server_process.check(paths, ServerCheck(wait_s=15), clock=clock.now, sleep=clock.sleep)
    assert not c.started and clock.slept == [] and len(c.log) == 30


def test_a_stop_is_written_once_so_status_does_not_call_it_a_death(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    ServerRecord(pid=os.getpid(), port=1).write(paths.server_pid)
    server_process._mark_stopped(paths)
    first = ServerRecord.read(paths.server_pid).stopped_at
    server_process._mark_stopped(paths)
    assert first is not None and ServerRecord.read(paths.server_pid).stopped_at == first
    server_process._mark_stopped(Paths(tmp_path / "none"))  # no pid file: nothing to mark


def test_the_wait_for_gpu_memory_ends_when_it_is_freed_or_at_the_timeout(monkeypatch):
    seen = iter(
        [[{"pid": 5, "used_mib": 9}], [{"pid": 5, "used_mib": 9}], [{"pid": 6, "used_mib": 1}]]
    )
    monkeypatch.setattr(server_process.machine, "compute_apps", lambda: next(seen))
    monkeypatch.setattr(server_process.time, "sleep", lambda s: None)
    freed = wait_gpu_free({5}, timeout=60)
    assert freed.free and freed.still_held_by == []  # pid 6 is not ours
    monkeypatch.setattr(server_process.machine, "compute_apps", lambda: [{"pid": 5, "used_mib": 9}])
    held = wait_gpu_free({5}, timeout=0)
    assert not held.free and [(a.pid, a.used_mib) for a in held.still_held_by] == [(5, 9)]
    monkeypatch.setattr(server_process.machine, "compute_apps", lambda: None)
    assert wait_gpu_free({5}, timeout=60) is None  # no nvidia-smi: nothing to wait for


def test_a_quick_status_says_up_and_its_stage_without_the_second_the_rate_takes(
    tmp_path, monkeypatch
):
    from remote.common.protocol import ServerStatus

    paths = Paths(tmp_path)
    paths.ensure()
    argv = ["vllm", "serve", "m", "--kv-transfer-config", "{}"]
    me = ServerRecord(
        pid=os.getpid(), start_time=procinfo.start_time(os.getpid()), port=1, argv=argv
    )
    me.write(paths.server_pid)  # alive: this process, started for the hidden-states stage
    monkeypatch.setattr(server_process, "served_models", lambda port, key=None: (200, ["m"]))
    monkeypatch.setattr(server_process.engines, "watch", lambda paths, rec: rec)
    read = []
    monkeypatch.setattr(server_process, "_metrics", lambda port: read.append(port) or {})
    st = server_process.server_state(paths, ServerStatus(quick=True))
    assert st.up and st.ready and st.extracts and st.metrics is None and read == []
    server_process.server_state(paths, ServerStatus())
    assert read == [1]  # the full look reads /metrics (no series: no second look, no sleep)
