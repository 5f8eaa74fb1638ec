"""Prompt files deployed under a running job: flagged, reloaded by a plain `restart`, or refused when
reloading would make old line-number ids name other prompts (real sshd, real HTTP test server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploytool.connectors import connect
from deploytool.errors import RemoteError
from deploytool.ops import control
from deploytool.ops.deploy import deploy_host
from remote.common import procinfo
from remote.common.status import Reload
from tests.conftest import (
    cli,
    record_ids,
    restart_unwatched,
    status,
    wait_for,
)


def append_prompts(path: Path, start: int, n: int, with_ids: bool) -> None:
    with open(path, "a") as f:
        for i in range(start, start + n):
            obj = {"prompt": f"new question {i}"}
            if with_ids:
                obj = {
                    "id": f"B2-{i:06d}",
                    "messages": [{"role": "user", "content": f"new question {i}"}],
                }
            f.write(json.dumps(obj) + "\n")


@pytest.fixture
def reload_job(project, openai_server):
    """make(b2_fmt, b1, b2) -> config: B1 and B2 (B2 in b2_fmt) against one test server."""
    srv = openai_server(latency=0.5)

    def make(b2_fmt: str, b1: int = 40, b2: int = 30):
        engine = {"base_url": srv.url, "concurrency": 2}
        return project.make({"B1": b1, "B2": b2}, fmt={"B2": b2_fmt}, engine=engine)

    return make, srv, project.proj, project.host_dir


@pytest.mark.slow
def test_prompts_appended_and_deployed_are_used_by_a_plain_restart(reload_job):
    make, srv, proj, host_dir = reload_job
    srv.hold_after = 4  # the job runs until the test has deployed and restarted, however slow
    cfg = make("prompt")  # no ids: line numbers are the ids, as in the report
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "100").returncode == 0
    wait_for(lambda: len(record_ids(host_dir, "B1")) >= 2, timeout=30, what="first records")

    append_prompts(proj / "data" / "prompts" / "B2.jsonl", 30, 20, with_ids=False)
    dry = cli(cfg, "deploy", "--dry-run")
    assert "would replace data/prompts/B2.jsonl, in use by the running job" in dry.stdout.replace(
        "\n", " "
    )
    res = cli(cfg, "deploy")
    assert res.returncode == 0 and "in use by the running job" in res.stdout
    assert "kept; deployed prompt files" in res.stdout and "(was " not in res.stdout, res.stdout
    wait_for(
        lambda: status(host_dir)["datasets"]["B2"]["prompts_changed"],
        timeout=15,
        what="change noticed",
    )
    res = cli(cfg, "status")
    # the hint names the command as this user types it: the hosts.yaml read, not ./hosts.yaml
    restart_here = f"`deploytool --config {cfg.path} restart`"
    assert f"B2: prompts changed on the host; {restart_here} to use them" in res.stdout
    assert status(host_dir)["datasets"]["B2"]["target"] == 30

    res = cli(cfg, "restart", "--max-samples", "100")  # unchanged caps
    assert res.returncode == 0, res.stderr
    assert "re-capped live" in res.stdout and "B2: prompts 30 → 50, reloaded" in res.stdout
    st = status(host_dir)
    assert st["datasets"]["B2"]["target"] == 50 and not st["datasets"]["B2"]["prompts_changed"]
    srv.hold_after, srv.latency = None, 0.05  # the rest as fast as it goes
    assert (
        st["datasets"]["B2"]["prompts_file"]["size"]
        == (proj / "data" / "prompts" / "B2.jsonl").stat().st_size
    )
    assert cli(cfg, "tail").returncode == 0
    assert sorted(record_ids(host_dir, "B2")) == [f"B2-{i:06d}" for i in range(50)]
    assert sorted(record_ids(host_dir, "B1")) == [f"B1-{i:06d}" for i in range(40)]
    assert len(srv.attempts) == 90 and set(srv.attempts.values()) == {
        1
    }  # nothing in flight was lost or redone


def test_rewritten_file_with_ids_reloads_live(reload_job):
    make, srv, proj, host_dir = reload_job
    cfg = make("messages", b1=20, b2=10)
    conn = connect(cfg.hosts["gpu"], cfg)
    try:
        deploy_host(conn, cfg)
        r = restart_unwatched(conn, control.parse_run_flags(cfg, max_samples=100))
        path = proj / "data" / "prompts" / "B2.jsonl"
        lines = path.read_text().splitlines()
        path.write_text("\n".join(list(reversed(lines))[:8]) + "\n")  # reordered, two dropped
        append_prompts(path, 10, 5, with_ids=True)
        deploy_host(conn, cfg)
        again = restart_unwatched(conn, control.parse_run_flags(cfg, max_samples=100))
        assert again.mode == "live" and again.pid == r.pid
        assert again.reloaded == {"B2": Reload(before=10, after=13)}
        wait_for(lambda: status(host_dir)["state"] == "finished", timeout=60, what="finished")
        expected = sorted({json.loads(x)["id"] for x in path.read_text().splitlines()})
        got = record_ids(host_dir, "B2")
        assert len(got) == len(set(got)) and set(expected) <= set(got)
        assert status(host_dir)["datasets"]["B2"]["done"] == 13
    finally:
        conn.close()


def test_rewritten_file_without_ids_is_refused_and_the_runner_untouched(reload_job):
    make, srv, proj, host_dir = reload_job
    cfg = make("prompt", b1=40, b2=10)
    conn = connect(cfg.hosts["gpu"], cfg)
    try:
        deploy_host(conn, cfg)
        r = restart_unwatched(conn, control.parse_run_flags(cfg, max_samples=100))
        path = proj / "data" / "prompts" / "B2.jsonl"
        path.write_text(json.dumps({"prompt": "inserted at the top"}) + "\n" + path.read_text())
        deploy_host(conn, cfg)
        before = status(host_dir)
        with pytest.raises(RemoteError) as e:
            restart_unwatched(conn, control.parse_run_flags(cfg, max_samples=100))
        msg = str(e.value)
        assert "B2: data/prompts/B2.jsonl was rewritten or cut, not only appended to" in msg
        assert "`id`" in msg and "move data/outputs/B2.jsonl aside" in msg
        assert "nothing changed" in msg and "--hard" not in msg
        assert procinfo.alive(r.pid)
        after = status(host_dir)
        assert (
            after["pid"] == r.pid
            and after["datasets"]["B2"]["target"] == before["datasets"]["B2"]["target"] == 10
        )
        assert after["datasets"]["B2"]["prompts_file"] == before["datasets"]["B2"]["prompts_file"]
    finally:
        conn.close()
