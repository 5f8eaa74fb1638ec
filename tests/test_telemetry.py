"""A job you can leave alone: the servers' and GPUs' own view in status and tail, notifications, a full
disk survived (real sshd, real HTTP test server with vLLM's /metrics, a tmpfs that fills)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import (
    base_job,
    cli,
    free_port,
    outputs,
    runner_cmd,
    runner_time_passes,
    ssh_host_entry,
    status,
    wait_for,
    write_config,
    write_prompts,
)
from tests.helpers.runner_jobs import make_root, run

REPO = Path(__file__).resolve().parent.parent


def notify_to(path: Path, extra: str = "") -> dict:
    cmd = f'echo "$DEPLOYTOOL_EVENT|$DEPLOYTOOL_REMOTE_DIR|$DEPLOYTOOL_MESSAGE" >> {path}{extra}'
    return {
        "command": cmd,
        "on": ["finished", "failed", "stalled", "engine_down", "disk_full", "engine_up"],
    }


def events(path: Path) -> list[str]:
    return [line.split("|")[0] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def sshd_job(tmp_path, ssh_rig):
    proj = tmp_path / "p"
    proj.mkdir()
    host_dir = tmp_path / "host"

    def make(n: int, engine: dict, notify: dict | None = None):
        write_prompts(proj / "data" / "prompts" / "B1.jsonl", n, "B1")
        spec = base_job(
            engine={"kind": "openai", "model": "test-model", "retry_base": 0.01, **engine}
        )
        if notify:
            spec["notify"] = notify
        return write_config(proj, {"gpu": ssh_host_entry(ssh_rig, host_dir)}, job=spec), host_dir

    yield make
    cli(proj / "hosts.yaml", "stop", "--grace", "0", timeout=60)


@pytest.mark.slow
def test_status_carries_the_servers_own_view(sshd_job, openai_server):
    srv = openai_server(slots=2, latency=0.4, engines=2)
    srv.hold_after = 30  # then 6 in flight until the test lets them go: running 2, waiting 4
    cfg, host_dir = sshd_job(60, {"base_url": srv.url, "concurrency": 6, "metrics_interval": 0.3})
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "60").returncode == 0

    def sampled():
        m = status(host_dir)["endpoints"][0]["metrics"]
        return m if m and m["waiting"] and m["running"] else None

    m = wait_for(sampled, timeout=20, what="metrics with requests waiting")
    assert (
        m["running"] == 2 and m["waiting"] >= 1
    )  # two engines' series summed: 6 in flight, 2 slots
    assert 0 < m["kv_cache"] <= 1 and m["preemptions"] == 0
    out = cli(cfg, "status").stdout
    assert "vLLM: running 2, waiting" in out and "KV cache" in out
    srv.hold_after = None
    assert cli(cfg, "tail").returncode == 0
    st = status(host_dir)
    assert st["endpoints"][0]["metrics"]["generation_tokens_per_s"] is not None
    assert st["disk"]["free_bytes"] > 0 and st["disk"]["full"] is False
    lines = [json.loads(x) for x in (host_dir / "run" / "history.jsonl").read_text().splitlines()]
    assert lines[0]["start"] and lines[1]["ds"]["B1"][0] >= 0  # a start marker, then minute lines


def test_stand_in_nvidia_smi_shows_every_gpu(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    rows = "\n".join(f"{i}, {90 + i}, {80000 + i}, 97887" for i in range(8))
    fake.write_text(f'#!/bin/sh\ncase "$*" in *query-gpu*) printf "{rows}\\n";; esac\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 400)
    job = base_job(
        engine={"kind": "simulate", "concurrency": 4, "tokens_per_s": 2000, "metrics_interval": 0.2}
    )
    cfg = write_config(tmp_path, {"local": {"connect": "local", "remote_dir": ".host"}}, job=job)
    assert cli(cfg, "deploy").returncode == 0
    try:
        assert cli(cfg, "restart", "--max-samples", "400").returncode == 0
        gpus = wait_for(
            lambda: status(tmp_path / ".host").get("gpus"), timeout=20, what="gpus sampled"
        )
        assert [g["index"] for g in gpus] == list(range(8))
        assert gpus[3] == {"index": 3, "util": 93, "memory_used": 80003, "memory_total": 97887}
        res = cli(cfg, "tail", "--once")
        assert "GPUs 8: util % 90 91 92 93 94 95 96 97" in res.stdout, res.stdout
        assert "GPUs 8" in cli(cfg, "status").stdout
    finally:
        cli(cfg, "stop", "--grace", "0")


def test_notify_finished_once_and_a_hanging_command_changes_nothing(
    sshd_job, openai_server, tmp_path
):
    srv = openai_server()
    log = tmp_path / "events.log"
    cfg, host_dir = sshd_job(
        8, {"base_url": srv.url, "concurrency": 4}, notify=notify_to(log, "; sleep 1000")
    )
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "8").returncode == 0
    assert cli(cfg, "tail").returncode == 0
    # the command sleeps 1000 s: a runner that waited for it would outlive this ceiling by far
    wait_for(
        lambda: not (host_dir / "run" / "runner.pid").exists() or not _alive(host_dir),
        timeout=300,
        what="the runner's exit while its notify command still hangs",
    )
    assert events(log) == ["finished"]
    event, remote_dir, message = log.read_text().splitlines()[0].split("|", 2)
    assert remote_dir == str(host_dir) and "finished; done 8/8" in message and "ETA" in message
    assert status(host_dir)["state"] == "finished" and status(host_dir)["notified"] == ["finished"]


def _alive(host_dir: Path) -> bool:
    from remote.common.state import ProcessRecord

    return ProcessRecord.live(host_dir / "run" / "runner.pid") is not None


def test_notify_engine_down_then_failed_each_once(tmp_path):
    log = tmp_path / "events.log"
    root = make_root(
        tmp_path, {"B1": 3}, {"base_url": f"http://127.0.0.1:{free_port()}/v1", "down_deadline": 2}
    )
    job = json.loads((root / "job.json").read_text())
    job["notify"] = notify_to(log)
    (root / "job.json").write_text(json.dumps(job))
    assert run(root).returncode == 1
    wait_for(lambda: len(events(log)) >= 2, timeout=10, what="notifications")
    assert events(log) == ["engine_down", "failed"]
    assert (
        "engine down: no server answers" in log.read_text()
        and "failed: engine unreachable" in log.read_text()
    )


def test_notify_stalled_once_and_a_failing_command_is_only_logged(tmp_path, openai_server):
    srv = openai_server(hang_rate=1.0)  # every request hangs
    log = tmp_path / "events.log"
    root = make_root(
        tmp_path, {"B1": 4}, {"base_url": srv.url, "stall_minutes": 0.02, "request_timeout": 600}
    )
    job = json.loads((root / "job.json").read_text())
    job["notify"] = {"command": f'echo "$DEPLOYTOOL_EVENT" >> {log}; exit 3'}
    (root / "job.json").write_text(json.dumps(job))
    proc = subprocess.Popen(
        runner_cmd(root, "--grace", "1"),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: events(log) == ["stalled"], timeout=20, what="stalled notification")
        wait_for(
            lambda: (
                "notify stalled: the command failed (exit 3)"
                in (root / "logs" / "runner.log").read_text()
            ),
            timeout=10,
            what="failure logged",
        )
        runner_time_passes(root, 3)  # three of the runner's checks after the first
        assert events(log) == ["stalled"]  # once, not once a second
        assert proc.poll() is None and status(root)["state"] == "running"  # the job goes on
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def small_tmpfs(tmp_path):
    where = outputs(tmp_path / "host")
    where.mkdir(parents=True)
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(where)], capture_output=True
    )
    if res.returncode != 0:
        why = f"cannot mount a tmpfs here: {res.stderr.decode().strip()}"
        if os.geteuid() == 0:  # CI and the README's commands run as root: there it must run
            pytest.fail(why)
        pytest.skip(why + " (mounting needs root)")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_is_survived_and_the_job_finishes_exactly_once(
    sshd_job, openai_server, small_tmpfs, tmp_path
):
    srv = openai_server(latency=0.05)
    log = tmp_path / "events.log"
    cfg, host_dir = sshd_job(400, {"base_url": srv.url, "concurrency": 4}, notify=notify_to(log))
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "400").returncode == 0
    wait_for(lambda: status(host_dir)["disk"]["full"], timeout=60, what="disk full")
    st = status(host_dir)
    assert st["state"] == "running" and _alive(host_dir)
    asked, at = sum(srv.attempts.values()), st["updated_at"]
    # three more of the runner's status ticks, each a chance to dispatch: no new work asked for
    wait_for(lambda: status(host_dir)["updated_at"] >= at + 3, timeout=60, what="3 status ticks")
    assert sum(srv.attempts.values()) == asked
    out = small_tmpfs / "B1.jsonl"
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x) for x in lines[:-1])  # no torn line
    assert "DISK FULL" in cli(cfg, "tail", "--once").stdout
    assert events(log) == ["disk_full"]

    subprocess.run(["mount", "-o", "remount,size=4m", str(small_tmpfs)], check=True)
    res = cli(cfg, "tail")
    assert res.returncode == 0, res.stdout[-2000:]
    ids = [json.loads(x)["id"] for x in out.read_text().splitlines()]
    assert sorted(ids) == [f"B1-{i:06d}" for i in range(400)]  # exactly once
    assert "disk has space again" in (host_dir / "logs" / "runner.log").read_text()
    wait_for(
        lambda: events(log) == ["disk_full", "finished"], timeout=10, what="finished notification"
    )


def _st(**endpoint):
    from remote.common.status import JobStatus

    base = {"url": "http://gpu1:8000/v1", "in_flight": 256, "concurrency": 256, "reachable": True}
    return JobStatus.from_dict(
        {
            "state": "running",
            "datasets": {
                "B2": {"state": "running", "done": 1639, "target": 7000, "in_flight": 256}
            },
            "endpoints": [dict(base, **endpoint)],
            "disk": {
                "free_bytes": 3 << 30,
                "total_bytes": 100 << 30,
                "full": False,
                "hours_left": 2.5,
            },
        }
    )


def test_hints_need_a_pattern_not_one_sample():
    from deploytool.views.progress import disk_line, hints

    room = {"running": 256, "waiting": 0, "kv_cache": 0.41, "new_preemptions": 0}
    assert hints(_st(metrics=dict(room, room_samples=2))) == []
    (h,) = hints(_st(metrics=dict(room, room_samples=3)))
    assert "gpu1:8000 runs every request it gets" in h and "KV cache at 41%" in h and "now 256" in h
    assert (
        hints(_st(metrics=dict(room, room_samples=5), in_flight=100)) == []
    )  # not at its cap: no advice
    (p,) = hints(_st(metrics=dict(room, new_preemptions=12, room_samples=0)))
    assert (
        "preempting requests (12 since the last sample)" in p
        and "lower job.engine.concurrency" in p
    )
    text, style = disk_line(_st())
    assert style == "yellow" and "about 2.5 h of output at the current rate" in text
