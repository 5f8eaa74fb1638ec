"""One job over several OpenAI-compatible servers (real HTTP servers on 127.0.0.1 ports, real sshd):
spread, failover when a server's process is killed, its return, every server down, per-host engines."""

from __future__ import annotations

import json

import pytest

from tests.conftest import (
    cli,
    free_port,
    outputs,
    records,
    ssh_host_entry,
    status,
    wait_for,
    write_config,
    write_prompts,
)
from tests.helpers.stand_ins import ServerProcess


@pytest.fixture
def servers():
    made: list[ServerProcess] = []

    def make(n: int, **kw) -> list[ServerProcess]:
        new = [ServerProcess(**kw).start() for _ in range(n)]
        made.extend(new)
        return new

    yield make, made
    for s in made:
        s.stop()


def pool_job(project, urls: list[str], n: int = 120, **engine):
    """A job of one dataset (B1, n prompts) over `urls`."""
    engine = {"base_urls": urls, "concurrency": 4, "request_timeout": 20, **engine}
    return project.make({"B1": n}, engine=engine), project.host_dir


def test_three_servers_share_the_job_exactly_once(project, servers):
    make, _ = servers
    srvs = make(3, latency=0.1)
    cfg, host_dir = pool_job(project, [s.url for s in srvs], n=90)
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "90").returncode == 0
    res = cli(cfg, "tail")
    assert res.returncode == 0, res.stdout + res.stderr
    ids = [r["id"] for r in records(host_dir, "B1")]
    assert sorted(ids) == [f"B1-{i:06d}" for i in range(90)]
    answered = [s.stats()["answered"] for s in srvs]
    assert sum(answered) == 90 and min(answered) >= 15  # every server used, none asked twice
    assert max(s.stats()["max_in_flight"] for s in srvs) <= 4  # `concurrency` is per server
    st = status(host_dir)
    assert [e["url"] for e in st["endpoints"]] == [s.url for s in srvs]
    assert sum(e["requests"] for e in st["endpoints"]) == 90 and st["concurrency"] == 12
    out = cli(cfg, "status").stdout
    assert all(f"server 127.0.0.1:{s.port}: up" in out for s in srvs)


@pytest.mark.slow
def test_a_killed_server_costs_nothing_and_is_used_again_when_back(project, servers, tmp_path):
    make, made = servers
    hold = tmp_path / "hold"  # while it exists the other two answer nothing: the job outlasts
    srvs = make(3, latency=0.4, hold_while=hold)  # the victim's absence, however slow the machine
    # a held request outlasts the hold, however long a busy machine makes it: no retry by design
    cfg, host_dir = pool_job(project, [s.url for s in srvs], n=180, request_timeout=600)
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "180").returncode == 0
    wait_for(lambda: len(records(host_dir, "B1")) >= 30, timeout=60, what="first records")
    hold.touch()
    victim = srvs[1]
    victim.kill()  # the process dies with 4 requests in flight: no clean shutdown

    def seen_down():
        st = status(host_dir)
        return not st["endpoints"][1]["reachable"] and st["endpoints"][1]["down_since"]

    wait_for(seen_down, timeout=20, what="status shows the server down")
    shown = cli(cfg, "tail", "--once").stdout
    assert f"server 127.0.0.1:{victim.port}: DOWN" in shown
    # the job is still going: the others hold every answer from the touch on, whatever the load
    assert len(records(host_dir, "B1")) < 180 and status(host_dir)["state"] == "running"
    back = ServerProcess(port=victim.port, latency=0.4).start()  # restarted on its port
    made.append(back)
    wait_for(lambda: status(host_dir)["endpoints"][1]["reachable"], what="the server back")
    hold.unlink()
    res = cli(cfg, "tail")
    assert res.returncode == 0, res.stdout + res.stderr
    ids = [r["id"] for r in records(host_dir, "B1")]
    assert len(ids) == len(set(ids)) == 180  # exactly once
    assert (
        not (outputs(host_dir) / "B1.errors.jsonl").exists()
        or (outputs(host_dir) / "B1.errors.jsonl").read_text() == ""
    )
    assert back.stats()["answered"] > 0  # used again before the job ended
    st = status(host_dir)
    assert (
        st["state"] == "finished"
        and all(e["reachable"] for e in st["endpoints"])
        and st["retries"] == 0
    )
    log = (host_dir / "logs" / "runner.log").read_text()
    assert (
        f"server {victim.url} unreachable" in log and f"server {victim.url} reachable again" in log
    )


def test_every_server_down_waits_then_fails_after_down_deadline(tmp_path):
    from tests.helpers.runner_jobs import make_root, run

    urls = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    root = make_root(tmp_path, {"B1": 3}, {"base_urls": urls, "down_deadline": 1.5})
    res = run(root)
    assert res.returncode == 1
    st = status(root)
    assert st["state"] == "failed" and "every engine server unreachable for" in st["message"]
    assert st["engine"]["reachable"] is False and not any(e["reachable"] for e in st["endpoints"])
    assert (
        not (outputs(root) / "B1.jsonl").exists() or (outputs(root) / "B1.jsonl").read_text() == ""
    )


def test_per_host_overrides_pick_each_hosts_engine(tmp_path, ssh_rig, openai_server):
    srv = openai_server()
    proj = tmp_path / "p"
    proj.mkdir()
    write_prompts(proj / "data" / "prompts" / "B1.jsonl", 6, "B1")
    gpu = ssh_host_entry(ssh_rig, tmp_path / "gpu-host")
    gpu["job"] = {
        "engine": {"kind": "openai", "base_url": srv.url, "model": "test-model"},
        "sampling": {"temperature": 0.6},
    }
    cfg = write_config(
        proj,
        {"local": {"connect": "local", "remote_dir": str(tmp_path / "local-host")}, "gpu": gpu},
    )
    try:
        assert cli(cfg, "deploy", "--host", "local,gpu").returncode == 0
        res = cli(cfg, "restart", "--host", "local,gpu", "--max-samples", "6")
        assert res.returncode == 0, res.stderr
        assert cli(cfg, "tail", "--host", "local,gpu").returncode == 0
        local = records(tmp_path / "local-host", "B1")
        remote = records(tmp_path / "gpu-host", "B1")
        assert len(local) == len(remote) == 6
        assert {r["model"] for r in local} == {"simulated"} and {r["model"] for r in remote} == {
            "test-model"
        }
        assert len(srv.bodies) == 6 and all(b["temperature"] == 0.6 for b in srv.bodies)
        job = json.loads((tmp_path / "gpu-host" / "current" / "job.json").read_text())
        assert job["engine"]["kind"] == "openai" and job["engine"]["base_urls"] == [srv.url]
    finally:
        cli(cfg, "stop", "--host", "local,gpu", "--grace", "0")
