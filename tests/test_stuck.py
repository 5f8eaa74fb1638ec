"""Streamed requests with a progress deadline: a request that stops making progress (a dead
data-parallel rank behind the server, a dropped request) is abandoned and sent again in seconds,
counted as stuck, never recorded twice; a streamed and a non-streamed answer make the same record."""

from __future__ import annotations

import json

from tests.conftest import cli, outputs, records, status, wait_for, write_config, write_prompts
from tests.helpers.runner_jobs import make_root, run, wire_job


def test_stuck_requests_are_sent_again_every_prompt_once(tmp_path, openai_server):
    # 10% hang before their first token (the dead rank's share), 10% stop after a few tokens
    srv = openai_server(shape="vllm", hang_rate=0.1, stall_rate=0.1, seed=3)
    engine = {
        "base_url": srv.url,
        "concurrency": 16,
        "first_token_timeout": 1,
        "progress_timeout": 1,
        "request_timeout": 600,
    }
    root = make_root(tmp_path, {"B1": 120}, engine)
    res = run(root, timeout=180)
    assert res.returncode == 0, res.stderr
    ids = [r["id"] for r in records(root, "B1")]
    assert sorted(ids) == [f"B1-{i:06d}" for i in range(120)]  # each once
    assert not (outputs(root) / "B1.errors.jsonl").read_text()
    st = status(root)
    ep = st["endpoints"][0]
    assert srv.hung >= 1 and srv.stalled >= 1
    assert ep["stuck"] >= srv.hung + srv.stalled >= 10 and ep["stuck"] == ep["stuck_recent"]
    assert st["retries"] == 0  # stuck is not a failure of the prompt
    # every hung or stalled request was asked again, and nothing was but what the runner let go as
    # stuck: on a busy machine a slow request is too, at times before the server has read it
    assert 120 + srv.hung + srv.stalled <= len(srv.bodies) <= 120 + ep["stuck"]
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in srv.bodies)


def test_a_streamed_and_a_plain_answer_make_the_same_record(tmp_path, openai_server):
    srv = openai_server(shape="vllm", cut_in_thinking=0.3)
    got = {}
    for stream in (True, False):
        root = make_root(
            tmp_path / str(stream), {"B1": 30}, {"base_url": srv.url, "stream": stream}
        )
        job = json.loads((root / "job.json").read_text())
        job["extra_body"] = {"return_token_ids": True}
        (root / "job.json").write_text(json.dumps(job))
        assert run(root).returncode == 0
        got[stream] = {r["id"]: dict(r, created=0) for r in records(root, "B1")}
    assert got[True] == got[False] and len(got[True]) == 30
    one = next(iter(got[True].values()))
    assert one["token_ids"] and len(one["token_ids"]) == one["usage"]["completion_tokens"]
    cut = [r for r in got[True].values() if r["finish_reason"] == "length"]
    assert cut and all(r["conversations"][-1]["content"] == "" for r in cut)
    assert all(r["conversations"][-1]["reasoning_content"] for r in cut)


def test_a_degraded_server_is_shown_and_notified(project, openai_server, tmp_path):
    srv = openai_server(shape="vllm", hang_rate=0.25, latency=0.05, seed=1)
    # of the 80 prompts: the job runs while status looks, however slow the machine; held answers
    # stream no token but are alive (held for as long as status takes, never stuck)
    srv.hold_after, srv.hold_alive = 60, True
    log = tmp_path / "events.log"
    cfg, host_dir = wire_job(
        project,
        {
            "base_url": srv.url,
            "concurrency": 8,
            "first_token_timeout": 1,
            "progress_timeout": 1,
            "request_timeout": 600,
        },
    )
    data = __import__("yaml").safe_load(cfg.path.read_text())
    data["job"]["notify"] = {"command": f'echo "$DEPLOYTOOL_EVENT" >> {log}'}
    cfg = write_config(cfg.path.parent, data["hosts"], job=data["job"])
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "40").returncode == 0
    wait_for(
        lambda: status(host_dir)["endpoints"][0]["stuck"] > 0, timeout=30, what="a stuck request"
    )
    res = cli(cfg, "status")
    out = " ".join(res.stdout.split())
    assert "stuck" in out and "DEGRADED" in out and "dead data-parallel rank" in out
    srv.hold_after = None
    wait_for(lambda: status(host_dir)["state"] == "finished", timeout=120, what="the job to end")
    for ds in ("B1", "B2"):
        assert len(records(host_dir, ds)) == 40
    wait_for(lambda: log.exists() and "finished" in log.read_text(), what="notified")
    events = log.read_text().split()
    assert events.count("engine_degraded") == 1 and events[-1] == "finished"


def test_timeouts_are_checked_in_hosts_yaml(tmp_path):
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 1)
    job = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl"}},
        "engine": {"kind": "openai", "progress_timeout": 0},
    }
    bad = tmp_path / "hosts.yaml"
    bad.write_text(
        json.dumps({"hosts": {"l": {"connect": "local", "remote_dir": "r"}}, "job": job})
    )
    res = cli(bad, "hosts")
    assert res.returncode == 2 and "job.engine.progress_timeout" in res.stderr
