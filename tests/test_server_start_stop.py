"""server.start / stop / status over the real sshd with a stand-in `vllm` (tests/fake_vllm.py)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from deploytool.connectors import connect
from deploytool.errors import RemoteError
from deploytool.ops import server
from deploytool.ops.control import call
from deploytool.ops.deploy import deploy_host
from deploytool.views import render_server
from remote.common import procinfo
from remote.common.answers import GpuApp, GpuFreed, ServerState
from remote.common.protocol import ServerStart
from remote.host.processes.smoke import degenerate
from tests.conftest import (
    base_job,
    cli,
    free_port,
    outputs,
    ssh_host_entry,
    start_unwatched,
    status,
    wait_for,
    write_config,
    write_prompts,
)
from tests.helpers.stand_ins import fake_vllm


@pytest.fixture
def host(tmp_path, ssh_rig):
    project = tmp_path / "p"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 30)
    port = free_port()
    exe = fake_vllm(tmp_path)

    def make(*args, ready_timeout=60, retry_base=0.01):
        job = base_job(
            engine={
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": "kimi",
                "concurrency": 4,
                "retry_base": retry_base,
            }
        )
        cfg = write_config(
            project,
            {"gpu": ssh_host_entry(ssh_rig, tmp_path / "host")},
            job=job,
            server={
                "command": str(exe),
                "model": "kimi",
                "port": port,
                "args": list(args),
                "env": {"HF_TOKEN": "hf_secret_value", "VLLM_LOGGING_LEVEL": "INFO"},
                "ready_timeout": ready_timeout,
            },
        )
        conn = connect(cfg.hosts["gpu"], cfg)
        deploy_host(conn, cfg)
        made.append(conn)
        return cfg, conn

    made = []
    yield make
    for conn in made:
        server.stop(conn, grace=0)
        conn.close()


def server_tree(host_dir: Path) -> list[int]:
    rec = json.loads((host_dir / "run" / "server.pid").read_text())
    token = rec["token"]
    return [
        p
        for p in procinfo.all_pids()
        if procinfo.environ(p).get("DEPLOYTOOL_SERVER_TOKEN") == token
    ]


def test_start_waits_for_ready_smoke_tests_and_masks_secrets(host, tmp_path):
    gate = tmp_path / "loaded"  # the server loads until the start has said it is waiting
    cfg, conn = host("--tensor-parallel-size", "8", "--fake-load-until", str(gate))
    notes = []

    def on_note(note: str) -> None:
        notes.append(note)
        gate.touch()

    r = start_unwatched(conn, cfg.server, poll=0.2, progress=on_note)
    assert r.ready_after_s > 0 and r.smoke.startswith("1, 2, 3")
    assert (
        r.argv[1:5] == ["serve", "kimi", "--port", str(cfg.server.port)]
        and "--tensor-parallel-size" in r.argv
    )
    assert r.env["HF_TOKEN"] == "****" and r.env["VLLM_LOGGING_LEVEL"] == "INFO"
    assert notes and "loading kimi" in notes[0]
    pidfile = (tmp_path / "host" / "run" / "server.pid").read_text()
    assert "hf_secret_value" not in pidfile
    again = start_unwatched(conn, cfg.server)
    assert again.already and again.pid == r.pid
    st = server.server_state(conn)
    assert st.up and st.ready and st.model == "kimi"
    m = st.metrics
    assert m.running == 3 and m.waiting == 1 and m.kv_cache == pytest.approx(0.42)
    assert 500 < m.generation_tokens_per_s < 2000


def test_a_start_while_another_is_loading_waits_for_it_and_says_who_started_it(host, tmp_path):
    gate = tmp_path / "loaded"
    cfg, conn = host("--fake-load-until", str(gate))
    first = call(conn, ServerStart(spec=cfg.server, recover={"enabled": False}))
    assert not first.already  # loading, until the gate opens
    notes = []

    def open_gate_once_waiting():
        wait_for(lambda: any("waiting for it" in n for n in notes), 60, 0.05, "the wait said")
        gate.touch()

    t = threading.Thread(target=open_gate_once_waiting)
    t.start()
    r = start_unwatched(conn, cfg.server, poll=0.1, progress=notes.append)
    t.join()
    assert r.already and r.waited and r.pid == first.pid
    assert "started by another server.start" in notes[0] and r.smoke.startswith("1, 2, 3")
    out = Console(record=True, width=200)
    render_server.server_started(r, out)
    assert f"server up: pid {r.pid} (started by another server.start)" in out.export_text()
    # once up, a start answers at once
    assert not start_unwatched(conn, cfg.server).waited


def test_smoke_test_names_the_model_the_server_serves(host):
    cfg, conn = host("--served-model-name", "tiny")
    r = start_unwatched(conn, cfg.server, poll=0.2)
    assert r.served_model == "tiny" and r.smoke.startswith("1, 2, 3")


def test_smoke_test_of_a_model_that_spends_its_tokens_thinking(host):
    cfg, conn = host("--fake-thinking")
    r = start_unwatched(conn, cfg.server, poll=0.2)
    assert r.smoke.startswith("1, 2, 3")  # judged on the thinking: content is null


def session_of(host_dir: Path) -> list[int]:
    rec = json.loads((host_dir / "run" / "server.pid").read_text())
    assert rec["sid"] == rec["pid"]
    return [p for p in procinfo.all_pids() if procinfo.sid(p) == rec["sid"]]


def test_hard_death_leaves_engine_processes_that_status_names_and_start_removes(host, tmp_path):
    import os
    import signal
    import subprocess

    cfg, conn = host("--fake-engine", "2", "--fake-workers", "0")
    base = [sys.executable, "-m", "deploytool", "--config", str(cfg.path)]
    first = start_unwatched(conn, cfg.server, poll=0.2)
    old = session_of(tmp_path / "host")
    assert len(old) == 3 and first.pid in old
    engines = [p for p in old if p != first.pid]
    assert all(procinfo.environ(p) == {} for p in engines)  # the token cannot find them
    os.kill(first.pid, signal.SIGKILL)  # the OOM killer, a segfault
    wait_for(lambda: not procinfo.alive(first.pid), what="server gone")
    assert all(procinfo.alive(p) for p in engines)

    res = subprocess.run(base + ["server.status"], capture_output=True, text=True)
    out = " ".join(res.stdout.split())
    assert res.returncode == 0, res.stderr
    assert "server down, but 2 processes of the dead server are still running" in out
    assert all(f"pid {p} " in out for p in engines) and "FAKE::EngineCore" in out
    assert "MiB RAM" in out and "invoke server.stop removes them" in out.replace("`", "")

    res = subprocess.run(base + ["server.start"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "removed 2 leftover processes of the dead server first" in " ".join(res.stdout.split())
    assert not any(procinfo.alive(p) for p in engines)
    new = session_of(tmp_path / "host")
    assert len(new) == 3 and not set(new) & set(old)

    # killed again: server.stop alone removes what is left
    new_pid = json.loads((tmp_path / "host" / "run" / "server.pid").read_text())["pid"]
    os.kill(new_pid, signal.SIGKILL)
    wait_for(lambda: not procinfo.alive(new_pid), what="server gone")
    res = subprocess.run(base + ["server.stop"], capture_output=True, text=True)
    assert res.returncode == 0 and "removed 2 leftover processes" in " ".join(res.stdout.split())
    wait_for(lambda: not any(procinfo.alive(p) for p in new), what="leftovers gone")
    assert server.server_state(conn).leftovers == []


def test_server_dying_in_startup_is_reported_with_its_log(host):
    cfg, conn = host("--fake-die")
    with pytest.raises(RemoteError, match="died during start-up") as e:
        start_unwatched(conn, cfg.server, poll=0.2)
    assert any("CUDA out of memory" in line for line in e.value.details)
    # its workers left the session (setsid) but keep the server's token: named, then removed
    st = server.server_state(conn)
    assert not st.up and st.died and len(st.leftovers) == 2
    gone = server.stop(conn, grace=0)
    assert sorted(p.pid for p in gone.removed) == sorted(p.pid for p in st.leftovers)
    wait_for(lambda: not any(procinfo.alive(p.pid) for p in st.leftovers), what="workers gone")


def test_startup_timeout_is_reported(host):
    cfg, conn = host("--fake-delay", "30", ready_timeout=1)
    with pytest.raises(RemoteError, match="not ready after 1s"):
        start_unwatched(conn, cfg.server, poll=0.2)


def test_degenerate_smoke_answer_is_rejected(host):
    cfg, conn = host("--fake-degenerate")
    with pytest.raises(RemoteError, match="degenerate .*one token repeated"):
        start_unwatched(conn, cfg.server, poll=0.2)


def test_stop_leaves_no_process_alive_workers_included(host, tmp_path):
    cfg, conn = host("--fake-workers", "3")
    r = start_unwatched(conn, cfg.server, poll=0.2)
    tree = server_tree(tmp_path / "host")
    assert r.pid in tree and len(tree) == 4  # the server and 3 workers in groups of their own
    assert len({procinfo.pgid(p) for p in tree}) == 4
    out = server.stop(conn, grace=2)
    assert out.was_running and out.alive == []
    assert set(out.killed) >= set(tree) - {
        r.pid
    }  # the workers ignored SIGTERM and outlived the parent
    wait_for(lambda: not any(procinfo.alive(p) for p in tree), what="whole tree gone")
    assert server.server_state(conn) == ServerState(host="gpu", up=False)
    assert server.stop(conn).was_running is False


def test_port_in_use_is_refused(host):
    import socket

    cfg, conn = host()
    s = socket.socket()
    s.bind(("127.0.0.1", cfg.server.port))
    s.listen()
    try:
        with pytest.raises(RemoteError, match=rf"port {cfg.server.port} is already in use by pid"):
            start_unwatched(conn, cfg.server)
    finally:
        s.close()


def test_restart_starts_the_server_first_then_the_runner_uses_it(host, tmp_path):
    import subprocess

    cfg, conn = host()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploytool",
            "--config",
            str(cfg.path),
            "restart",
            "--max-samples",
            "5",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert (
        "starting it first" in res.stdout
        and "server up" in res.stdout
        and "started runner" in res.stdout
    )
    assert "hf_secret_value" not in res.stdout and "HF_TOKEN=****" in res.stdout
    out = outputs(tmp_path / "host") / "B1.jsonl"
    wait_for(
        lambda: out.exists() and len(out.read_text().splitlines()) == 5,
        what="records from the server",
    )
    assert json.loads(out.read_text().splitlines()[0])["model"] == "kimi"


def test_a_restart_the_host_refuses_starts_no_server_for_it(host, tmp_path):
    """The host's word comes before the server is started: a model loads for minutes, and a
    restart refused after that would leave a server up that nobody asked for."""
    cfg, conn = host()
    made = outputs(tmp_path / "host")  # B1's records, made at another temperature than the job's
    made.mkdir(parents=True, exist_ok=True)
    (made / "B1.jsonl").write_text(json.dumps({"id": "B1-0"}) + "\n")
    (made / "B1.meta.json").write_text(json.dumps({"sampling": {"temperature": 0.7}}))
    res = cli(cfg, "restart")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "B1: its records were made with different sampling" in res.stderr
    assert "starting it first" not in res.stdout
    assert not server.server_state(conn).up


def test_a_server_the_host_has_nothing_to_run_is_refused_by_the_restarts_dry_run(host, tmp_path):
    """What would refuse the server's start refuses the restart before anything is stopped, its
    dry run too: a restart over several hosts asks each host's dry run before it changes any."""
    cfg, conn = host()
    (tmp_path / "bin" / "vllm").unlink()  # server.command names nothing on the host now
    for args in (("restart", "--dry-run"), ("restart",)):
        res = cli(cfg, *args)
        assert res.returncode != 0, (args, res.stdout + res.stderr)
        assert "not found on the host" in res.stderr, (args, res.stdout + res.stderr)
        assert "starting it first" not in res.stdout
    run = tmp_path / "host" / "run"
    assert not (run / "switch.json").exists() and not (run / "runner.pid").exists()
    assert not server.server_state(conn).up


def test_a_job_waiting_for_its_server_goes_on_as_soon_as_server_start_has_it_up(host, tmp_path):
    """A runner whose server is down waits between looks, each twice as long as the one before (up
    to a minute); `server.start` on its host is news it acts on at once. Here its first wait (500 to
    1,000 s) outlasts the test: the job can only finish by the news."""
    cfg, _ = host(retry_base=1000.0)
    res = cli(cfg, "restart", "--no-server", "--force")
    assert res.returncode == 0, res.stdout + res.stderr
    log = tmp_path / "host" / "logs" / "runner.log"
    wait_for(lambda: "unreachable" in log.read_text(), what="the runner to find its server down")
    res = cli(cfg, "server.start")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: status(tmp_path / "host")["state"] == "finished", what="the job to finish")
    assert "a server started on this host is ready; probing now" in log.read_text()


def test_server_stop_waits_for_gpu_memory(tmp_path, monkeypatch):
    from remote.host.processes import server_process as remote_server

    sleeper = __import__("subprocess").Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        f"#!/bin/sh\nkill -0 {sleeper.pid} 2>/dev/null && echo '{sleeper.pid}, 1000'\nexit 0\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("DEPLOYTOOL_NVIDIA_SMI", str(fake))
    held = remote_server.wait_gpu_free({sleeper.pid}, timeout=0.3)
    assert held == GpuFreed(False, [GpuApp(sleeper.pid, 1000)])
    sleeper.kill()
    sleeper.wait()
    assert remote_server.wait_gpu_free({sleeper.pid}, timeout=5) == GpuFreed(True, [])


@pytest.mark.slow
def test_data_parallel_group_on_two_hosts_headless_worker(tmp_path, ssh_rig):
    import subprocess

    project = tmp_path / "p"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 3)
    exe = fake_vllm(tmp_path)
    head_port, worker_port = free_port(), free_port()
    head = ssh_host_entry(ssh_rig, tmp_path / "head")
    worker = ssh_host_entry(ssh_rig, tmp_path / "worker")
    worker["server"] = {
        "headless": True,
        "port": worker_port,
        "args": ["--fake-delay", "0.2", "--fake-workers", "1", "--headless"],
    }
    job = base_job(
        engine={"kind": "openai", "base_url": f"http://127.0.0.1:{head_port}/v1", "model": "kimi"}
    )
    cfg = write_config(
        project,
        {"head": head, "worker": worker},
        job=job,
        server={
            "command": str(exe),
            "model": "kimi",
            "port": head_port,
            "args": ["--fake-delay", "0.2", "--fake-workers", "1"],
        },
    )
    base = [sys.executable, "-m", "deploytool", "--config", str(cfg.path)]
    try:
        assert (
            subprocess.run(
                base + ["deploy", "--host", "head,worker"], capture_output=True
            ).returncode
            == 0
        )
        res = subprocess.run(
            base + ["server.start", "--host", "head,worker"], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stdout + res.stderr
        assert "head: server up: pid" in res.stdout and f"on port {head_port}" in res.stdout
        assert "smoke test: '1, 2, 3" in res.stdout
        assert (
            "worker: server up: pid" in res.stdout and "headless worker, ready after" in res.stdout
        )
        assert "no HTTP, no smoke test" in res.stdout
        assert (
            json.loads((tmp_path / "worker" / "run" / "server.pid").read_text())["headless"] is True
        )
        res = subprocess.run(
            base + ["server.status", "--host", "head,worker"], capture_output=True, text=True
        )
        assert "head: server up" in res.stdout and "worker: server up" in res.stdout
        assert "as a headless data-parallel worker" in res.stdout
        res = subprocess.run(
            base + ["server.stop", "--host", "head,worker"], capture_output=True, text=True
        )
        assert (
            res.returncode == 0
            and "head: server pid" in res.stdout
            and "worker: server pid" in res.stdout
        )
    finally:
        subprocess.run(
            base + ["server.stop", "--host", "head,worker", "--grace", "0"], capture_output=True
        )


@pytest.mark.parametrize(
    "text, bad",
    [
        ("", True),
        ("the the the the the the the the the", True),
        ("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", True),
        ("1, 2, 3, 4, 5, 6, 7, 8, 9, 10", False),
        ("Sure: one two three.", False),
    ],
)
def test_degenerate_detector(text, bad):
    assert (degenerate(text) is not None) == bad
