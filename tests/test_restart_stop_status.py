"""restart / stop / status over the real sshd, with the real runner against the OpenAI test server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deploytool.connectors import connect
from deploytool.errors import RemoteError, UsageError
from deploytool.ops import control
from deploytool.ops.deploy import deploy_host
from remote.common import procinfo
from remote.common.protocol import CtlStart
from remote.common.wire import read_envelope
from tests.conftest import (
    base_job,
    record_ids,
    restart_unwatched,
    ssh_host_entry,
    status,
    wait_for,
    write_config,
    write_prompts,
)


@pytest.fixture
def job(tmp_path, ssh_rig, openai_server):
    """A deployed job on the sshd host, talking to a slow-enough OpenAI test server."""
    srv = openai_server(latency=0.25)
    project = tmp_path / "project"
    project.mkdir()
    for ds in ("B1", "B2"):
        write_prompts(project / "data" / "prompts" / f"{ds}.jsonl", 400, ds)
    host_dir = tmp_path / "host"
    spec = base_job(
        datasets={
            ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 100} for ds in ("B1", "B2")
        },
        engine={
            "kind": "openai",
            "base_url": srv.url,
            "model": "test-model",
            "concurrency": 4,
            "retry_base": 0.01,
        },
    )
    cfg = write_config(project, {"gpu": ssh_host_entry(ssh_rig, host_dir)}, job=spec)
    conn = connect(cfg.hosts["gpu"], cfg)
    deploy_host(conn, cfg)
    yield {"cfg": cfg, "conn": conn, "srv": srv, "host_dir": host_dir, "project": project}
    try:
        control.stop(conn, grace=0)
    finally:
        conn.close()


def flags(cfg, **kw):
    return control.parse_run_flags(cfg, **kw)


def runners_of(root: Path) -> list[int]:
    from remote.common.jobspec import Paths
    from remote.host.facts.strays import stray_runners

    return stray_runners(Paths(root), set())


def test_restart_starts_then_live_recap_keeps_the_process(job):
    cfg, conn, srv, root = job["cfg"], job["conn"], job["srv"], job["host_dir"]
    r1 = restart_unwatched(conn, flags(cfg, max_samples=300))
    assert r1.mode == "start" and r1.state == "running"
    assert r1.caps["B1"].target == 300
    wait_for(lambda: len(record_ids(root, "B1")) >= 8, what="progress")
    r2 = restart_unwatched(conn, flags(cfg, max_samples=20, cap=["B2=5"]))
    assert r2.mode == "live" and r2.pid == r1.pid and r2.lost_in_flight == 0
    assert r2.caps["B1"].target == 20 and r2.caps["B2"].target == 5
    wait_for(lambda: status(root)["state"] == "finished", timeout=60, what="finish")
    assert max(srv.attempts.values()) == 1  # the server saw no request twice
    assert len(record_ids(root, "B2")) == 5 and set(record_ids(root, "B1")) >= {
        f"B1-{i:06d}" for i in range(20)
    }
    wait_for(lambda: runners_of(root) == [], what="the finished runner exits")


def test_hard_restart_leaves_exactly_one_runner_and_loses_nothing(job):
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    r1 = restart_unwatched(conn, flags(cfg, max_samples=60, grace=10))
    wait_for(lambda: len(record_ids(root, "B1")) >= 4, what="progress")
    r2 = restart_unwatched(conn, flags(cfg, max_samples=60, grace=10), hard=True)
    assert r2.mode == "restart" and r2.pid != r1.pid
    assert r2.stopped.stopped == [r1.pid] and r2.stopped.killed == []
    # graceful: in-flight requests finished inside the grace period
    assert r2.lost_in_flight == 0
    assert not procinfo.alive(r1.pid)
    assert runners_of(root) == [r2.pid]
    wait_for(lambda: status(root)["state"] == "finished", timeout=60, what="finish")
    for ds in ("B1", "B2"):
        got = record_ids(root, ds)
        assert sorted(got) == [f"{ds}-{i:06d}" for i in range(60)]


def test_kill_9_then_restart_resumes_without_loss_or_duplicates(job):
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    r1 = restart_unwatched(conn, flags(cfg, max_samples=40))
    wait_for(lambda: len(record_ids(root, "B1")) >= 6, what="progress")
    os.kill(r1.pid, signal.SIGKILL)
    wait_for(lambda: not procinfo.alive(r1.pid), what="runner dead")
    st = control.job_status(conn)
    assert st.state == "stopped" and not st.runner.alive
    r2 = restart_unwatched(conn, flags(cfg, max_samples=40))
    assert r2.mode == "start"
    wait_for(lambda: status(root)["state"] == "finished", timeout=60, what="finish")
    for ds in ("B1", "B2"):
        got = record_ids(root, ds)
        assert len(got) == len(set(got)) and sorted(got) == [f"{ds}-{i:06d}" for i in range(40)]


def test_drain_restart_loses_no_request(job):
    cfg, conn, srv, root = job["cfg"], job["conn"], job["srv"], job["host_dir"]
    restart_unwatched(conn, flags(cfg, max_samples=60))
    wait_for(lambda: srv.in_flight == 4, what="window full")
    r = restart_unwatched(conn, flags(cfg, max_samples=60), hard=True, drain=True)
    assert r.mode == "restart" and r.lost_in_flight == 0 and r.stopped.drained
    wait_for(lambda: status(root)["state"] == "finished", timeout=60, what="finish")
    assert max(srv.attempts.values()) == 1


def test_grace_0_restart_reports_lost_requests(job):
    cfg, conn, srv, root = job["cfg"], job["conn"], job["srv"], job["host_dir"]
    srv.hold_after = 0  # no answer comes: the window stays full until the restart
    restart_unwatched(conn, flags(cfg, max_samples=60, grace=0))
    # the count comes from the runner's status file, written once a second
    wait_for(lambda: srv.in_flight == 4 and status(root)["in_flight"] == 4, what="window full")
    r = restart_unwatched(conn, flags(cfg, max_samples=60, grace=0), hard=True)
    assert r.lost_in_flight == 4, r.stopped


@pytest.mark.parametrize("drain", [False, True])
def test_a_runner_killed_during_a_stops_grace_has_its_requests_in_flight_counted(job, drain):
    """kill -9 of the runner while a stop waits out its grace (or its drain): it wrote no verdict,
    so what it had in flight at its last status is what was cut off (it said 0), and the stop says
    the end was not its own."""
    import threading

    cfg, conn, srv, root = job["cfg"], job["conn"], job["srv"], job["host_dir"]
    srv.hold_after = 0  # no answer comes: the window stays full
    restart_unwatched(conn, flags(cfg, max_samples=60))
    wait_for(lambda: srv.in_flight == 4 and status(root)["in_flight"] == 4, what="window full")
    pid = status(root)["pid"]
    answer = {}
    stop = lambda: answer.update(r=control.stop(conn, grace=3600, drain=drain))  # noqa: E731
    stopping = threading.Thread(target=stop)
    stopping.start()
    begun = (lambda st: st.get("draining")) if drain else (lambda st: st.get("stopping") == 3600)
    wait_for(lambda: begun(status(root)), what="the stop's grace or drain begun")
    os.kill(pid, signal.SIGKILL)
    stopping.join(timeout=120)
    assert not stopping.is_alive(), "the stop did not see the runner gone"
    r = answer["r"]
    assert r.lost_in_flight == 4 and not r.drained, r
    assert "not by this stop's hand (killed -9?)" in r.found, r


def test_hand_started_runner_is_found_and_decoys_survive(job, tmp_path):
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    job["srv"].hold_after = 10  # the hand runner is still running when it is looked for
    current = (root / "current").resolve()
    hand = subprocess.Popen(
        [sys.executable, "-m", "remote", "run", "--max-samples", "50"],
        cwd=current,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(
        lambda: (
            (root / "run" / "runner.pid").exists()
            and (root / "run" / "status.json").exists()  # written just after the pid file
            and status(root)["state"] == "running"
        ),
        what="hand runner",
    )
    (root / "run" / "runner.pid").unlink()  # the pid file is lost
    # decoys: same names, other directories
    decoy_dir = tmp_path / "elsewhere"
    decoy_dir.mkdir()
    (decoy_dir / "run_inference.py").write_text("import time\ntime.sleep(600)\n")
    decoy1 = subprocess.Popen(
        [sys.executable, "run_inference.py", "--max-samples", "7000"], cwd=decoy_dir
    )
    decoy2 = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "-m", "remote", "run"], cwd=decoy_dir
    )
    try:
        # shown once past a start's seconds (a runner writes its pid file as it starts)
        wait_for(lambda: control.job_status(conn).strays == [hand.pid], what="the stray shown")
        r = restart_unwatched(conn, flags(cfg, max_samples=50, grace=1))
        assert hand.pid in r.stopped.strays
        assert hand.wait(10) is not None
        assert decoy1.poll() is None and decoy2.poll() is None
        assert runners_of(root) == [r.pid]
    finally:
        for p in (decoy1, decoy2, hand):
            p.kill()
            p.wait()


def test_runner_ignoring_sigterm_is_killed_with_its_children(job, tmp_path):
    conn, root = job["conn"], job["host_dir"]
    child_pid_file = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # a worker in a session of its own (like vLLM's), which outlives its parent
        code = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        open({str(child_pid_file)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)
    token = "tok-ignore-term"
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=dict(os.environ, DEPLOYTOOL_JOB_TOKEN=token),
        start_new_session=True,
    )
    wait_for(child_pid_file.exists, what="child")
    child = int(child_pid_file.read_text())
    (root / "run").mkdir(exist_ok=True)
    (root / "run" / "runner.pid").write_text(
        json.dumps(
            {
                "pid": proc.pid,
                "start_time": procinfo.start_time(proc.pid),
                "token": token,
                "release": str(root),
            }
        )
    )
    r = control.stop(conn, grace=1)
    assert r.stopped == [proc.pid] and proc.pid in r.killed and child in r.killed
    assert proc.wait(5) == -signal.SIGKILL
    wait_for(lambda: not procinfo.alive(child), what="child gone")
    assert control.stop(conn, grace=1).was_running is False  # idempotent


def test_stale_pid_file_of_a_reused_pid_is_not_signalled(job):
    conn, root = job["conn"], job["host_dir"]
    innocent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (root / "run").mkdir(exist_ok=True)
        (root / "run" / "runner.pid").write_text(
            json.dumps({"pid": innocent.pid, "start_time": 12345, "token": "old"})
        )  # same pid, different process
        assert control.stop(conn, grace=0).was_running is False
        assert innocent.poll() is None
    finally:
        innocent.kill()
        innocent.wait()


def test_invalid_flags_change_nothing(job):
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    r = restart_unwatched(conn, flags(cfg, max_samples=100))
    for bad in (
        {"max_samples": "-1"},
        {"max_samples": "ten"},
        {"cap": ["B9=3"]},
        {"cap": ["B1"]},
        {"max_tokens": "10Q"},
        {"datasets": "B1,B9"},
        {"datasets": "B1;rm"},
    ):
        with pytest.raises(UsageError):
            flags(cfg, **bad)
    # the same through the CLI: exit 2, and the runner is untouched
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploytool",
            "--config",
            str(cfg.path),
            "restart",
            "--max-samples",
            "-5",
        ],
        cwd=job["project"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and res.stderr.startswith(
        "error: --max-samples: expected a number >= 1 or `all`, got -5"
    )
    assert procinfo.alive(r.pid) and status(root)["caps"]["max_samples"] == 100


def test_second_start_refused_by_lock(job):
    cfg, conn = job["cfg"], job["conn"]
    restart_unwatched(conn, flags(cfg, max_samples=100))
    with pytest.raises(RemoteError, match="already running"):
        control.call(conn, CtlStart(max_samples=5))


def test_runner_dying_at_start_shows_its_log(job):
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    (root / "data" / "prompts" / "B2.jsonl").unlink()
    with pytest.raises(RemoteError) as e:
        restart_unwatched(conn, flags(cfg, max_samples=10))
    assert "exited with code 2" in str(e.value)
    assert "`invoke restart` starts it again" in str(e.value)  # the way on, said
    assert any("prompts file" in line for line in e.value.details)
    # a runner that dies at its start shows its own lines, none of the runner before it
    restart_unwatched(conn, flags(cfg, max_samples=1, datasets="B1"))
    wait_for(lambda: status(root)["state"] == "finished", what="a runner's end in the log")
    with pytest.raises(RemoteError) as e:
        restart_unwatched(conn, flags(cfg, max_samples=10, datasets="all"))
    assert "exited with code 2" in str(e.value)
    assert not any("finished" in line for line in e.value.details), e.value.details


def test_not_deployed_is_one_clear_line(ssh_rig, tmp_path):
    cfg = write_config(tmp_path, {"gpu": ssh_host_entry(ssh_rig, tmp_path / "empty")})
    with connect(cfg.hosts["gpu"], cfg) as conn:
        with pytest.raises(RemoteError, match=r"nothing deployed .*run `invoke deploy` first"):
            control.job_status(conn)


def test_new_release_means_real_restart(job, tmp_path):
    import shutil

    from deploytool.ops.deploy import PACKAGE_DIR, build_release

    cfg, conn = job["cfg"], job["conn"]
    r1 = restart_unwatched(conn, flags(cfg, max_samples=100))
    pkg = tmp_path / "pkg"
    shutil.copytree(PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "extra.py").write_text("# new code\n")
    new = deploy_host(conn, cfg, release=build_release(cfg, pkg))
    r2 = restart_unwatched(conn, flags(cfg, max_samples=100, grace=5))
    assert r2.mode == "restart" and r2.pid != r1.pid and r2.release.endswith(new.release)


def test_gpu_check_refuses_foreign_gpu_memory(job, tmp_path):
    root = job["host_dir"]
    # a process that is no child of anything of ours (re-parented to init), holding "GPU memory"
    hog = int(
        subprocess.run(
            ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
        ).stdout
    )
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho '{hog}, 40960'\n")
    fake.chmod(0o755)
    env = dict(os.environ, DEPLOYTOOL_NVIDIA_SMI=str(fake))
    cmd = [sys.executable, "-m", "remote", "ctl", "start", "--max-samples", "3"]
    try:
        res = subprocess.run(
            cmd, cwd=(root / "current").resolve(), env=env, capture_output=True, text=True
        )
        fault = read_envelope(json.loads(res.stdout), CtlStart.answer_type())
        assert res.returncode == 1 and fault.code == "gpu_busy"
        assert f"pid {hog} (40960 MiB: sleep 600)" in fault.message and "--force-gpu" in fault.fix
        assert [a["pid"] for a in fault.detail["gpu"]["blocking"]] == [hog]
        assert not (root / "run" / "runner.pid").exists()
        res = subprocess.run(
            cmd + ["--force-gpu"],
            cwd=(root / "current").resolve(),
            env=env,
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        os.kill(hog, signal.SIGKILL)


def test_gpu_check_allows_the_engine_server_session(job, tmp_path):
    """GPU memory held by the process serving the engine's port (and its children: vLLM workers) is fine."""
    from remote.common.jobspec import Paths
    from remote.host.facts import gpu
    from remote.host.processes import server_process

    srv_proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import socket, subprocess, sys, time
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
        w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(s.getsockname()[1], w.pid, flush=True)
        time.sleep(600)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        port, worker = map(int, srv_proc.stdout.readline().split())
        fake = tmp_path / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\necho '{srv_proc.pid}, 100'\necho '{worker}, 90000'\n")
        fake.chmod(0o755)
        os.environ["DEPLOYTOOL_NVIDIA_SMI"] = str(fake)
        try:
            report = gpu.check(server_process.allowed_pids(Paths(job["host_dir"]), port))
            assert report.checked and report.blocking == []
            with pytest.raises(gpu.GPUBusy):
                gpu.check(
                    server_process.allowed_pids(Paths(job["host_dir"]), None)
                )  # not the engine's: refused
        finally:
            del os.environ["DEPLOYTOOL_NVIDIA_SMI"]
    finally:
        os.killpg(srv_proc.pid, signal.SIGKILL)
        srv_proc.wait()


def test_cli_status_json_and_stop(job):
    cfg, root = job["cfg"], job["host_dir"]
    job["srv"].hold_after = 20  # running when status and stop look
    base = [sys.executable, "-m", "deploytool", "--config", str(cfg.path)]
    res = subprocess.run(
        base + ["restart", "--max-samples", "100", "--cap", "B2=3"],
        cwd=job["project"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "started runner pid" in res.stdout and "B2" in res.stdout
    res = subprocess.run(
        base + ["status", "--json"], cwd=job["project"], capture_output=True, text=True
    )
    st = json.loads(res.stdout)["gpu"]
    assert st["state"] == "running" and st["datasets"]["B2"]["target"] == 3 and st["token"] is None
    res = subprocess.run(
        base + ["stop", "--grace", "1"], cwd=job["project"], capture_output=True, text=True
    )
    assert res.returncode == 0 and "gpu: stopped" in res.stdout
    assert status(root)["state"] == "stopped"
    wait_for(lambda: runners_of(root) == [], what="no runner left")


def test_live_recap_refused_by_the_runner_is_reported(job):
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    r = restart_unwatched(conn, flags(cfg, max_samples=100, datasets="B1"))
    (root / "data" / "prompts" / "B2.jsonl").unlink()  # B2 cannot be opened now
    with pytest.raises(RemoteError, match="refused: B2: prompts file"):
        restart_unwatched(conn, flags(cfg, datasets="all"))
    assert procinfo.alive(r.pid)  # the runner goes on with what it had
    assert status(root)["caps"]["datasets"] == ["B1"]
    assert json.loads((root / "run" / "caps.json").read_text())["datasets"] == ["B1"]


def test_a_start_that_fails_leaves_the_caps_as_they_were(job):
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    restart_unwatched(conn, flags(cfg, max_samples=100, datasets="B1"))
    control.stop(conn, grace=0)
    caps = (root / "run" / "caps.json").read_bytes()
    (root / "data" / "prompts" / "B2.jsonl").unlink()  # B2 cannot be opened now
    with pytest.raises(RemoteError, match="exited with code 2"):
        restart_unwatched(conn, flags(cfg, datasets="all"))
    assert (root / "run" / "caps.json").read_bytes() == caps  # a bare restart runs what it had


def test_a_stop_that_finds_the_runner_stopping_by_someone_elses_signal_keeps_their_word(job):
    """`kill -TERM` by hand, then `invoke stop` during its grace: the end was the signal's, and
    status and stop say so, never 'stopped as asked'."""
    cfg, conn, root = job["cfg"], job["conn"], job["host_dir"]
    job["srv"].latency = 600  # in flight all along: the runner is still stopping when stop comes
    r = restart_unwatched(conn, flags(cfg, max_samples=100))
    wait_for(lambda: status(root)["in_flight"] > 0, what="requests in flight")
    os.kill(r.pid, signal.SIGTERM)
    wait_for(lambda: status(root).get("signalled") == "SIGTERM", what="the runner stopping")
    out = control.stop(conn, grace=5)
    assert out.stopped == [r.pid]
    assert out.found == "it was stopping already, after a SIGTERM not of deploytool's"
    st = status(root)
    assert st["state"] == "stopped"
    assert st["message"] == "stopped by SIGTERM, not by deploytool (someone's kill, a shutdown)"
    again = control.stop(conn, grace=0)
    assert not again.was_running
    assert again.found == f"the last one, pid {r.pid}: {st['message']}"
