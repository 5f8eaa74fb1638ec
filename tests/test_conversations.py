"""Whole conversations (`turns: all`): every assistant turn regenerated in order from the turns
before it, one record per conversation, finished turns kept through kill -9, a conversation's
turns on one server."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from tests.conftest import REPO, outputs, records, runner_cmd, status, wait_for
from tests.helpers.conversations import ORIGINAL, conversation_root
from tests.helpers.runner_jobs import run


def asked(srv) -> dict[str, list[list]]:
    """Each conversation's requests, by its number, in the order they came."""
    out: dict[str, list] = {}
    for b in srv.bodies:
        first = next(m["content"] for m in b["messages"] if m["role"] == "user")
        out.setdefault(first.split(" turn")[0], []).append(b["messages"])
    return out


def sent_form(msgs: list) -> list:
    """A recorded conversation as the server is sent it: thinking in `reasoning`."""
    out = []
    for m in msgs:
        m = dict(m)
        if "reasoning_content" in m:
            m["reasoning"] = m.pop("reasoning_content")
        out.append(m)
    return out


def test_every_turn_is_regenerated_from_the_replies_before_it(tmp_path, openai_server):
    srv = openai_server(shape="vllm")
    root = conversation_root(tmp_path, 12, {"base_url": srv.url, "concurrency": 4})
    res = run(root)
    assert res.returncode == 0, res.stderr
    recs = {r["id"]: r for r in records(root, "MT")}
    assert sorted(recs) == [f"MT-{i:06d}" for i in range(12)]  # each conversation once
    assert len(srv.bodies) == 36  # three turns each, each asked once
    assert ORIGINAL not in json.dumps(srv.bodies) and ORIGINAL not in json.dumps(recs)
    by_conv = asked(srv)
    for r in recs.values():
        convo = r["conversations"]
        assert [m["role"] for m in convo] == ["system"] + ["user", "assistant"] * 3
        assert r["turns_done"] == r["turns_total"] == 3 and len(r["turns"]) == 3
        mine = by_conv[f"conversation {r['index']}"]
        # request k carries exactly the recorded replies 1..k-1 (and the user turns up to k)
        assert mine == [sent_form(convo[: 2 + 2 * k]) for k in range(3)]
        assert all(t["token_ids"] and t["finish_reason"] == "stop" for t in r["turns"])
        assert r["usage"]["completion_tokens"] == sum(
            t["usage"]["completion_tokens"] for t in r["turns"]
        )
        assert all(m["reasoning_content"] == "thinking" for m in convo if m["role"] == "assistant")
    st = status(root)
    assert st["datasets"]["MT"]["done"] == 12
    assert st["datasets"]["MT"]["completion_tokens"] == sum(
        r["usage"]["completion_tokens"] for r in recs.values()
    )
    # the sidecar holds nothing once every conversation is recorded (rewritten at the next start)
    assert run(root).returncode == 0
    assert (outputs(root) / "MT.partial.jsonl").read_text() == ""


def test_a_reply_cut_at_max_tokens_ends_its_conversation(tmp_path, openai_server):
    srv = openai_server(shape="vllm", cut_in_thinking=0.3, seed=2)
    root = conversation_root(tmp_path, 20, {"base_url": srv.url})
    assert run(root).returncode == 0
    recs = records(root, "MT")
    assert len(recs) == 20
    cut = [r for r in recs if r["finish_reason"] == "length"]
    assert cut and all(r["turns_done"] <= 3 for r in cut)
    for r in recs:
        assert (
            r["turns_done"]
            == len(r["turns"])
            == sum(m["role"] == "assistant" for m in r["conversations"])
        )
        # only the last turn may be cut: a cut reply is never followed by another turn
        assert all(t["finish_reason"] == "stop" for t in r["turns"][:-1])
        if r["turns_done"] < 3:
            assert r["finish_reason"] == "length"
    assert len(srv.bodies) == sum(r["turns_done"] for r in recs)
    assert any(r["turns_done"] < 3 for r in cut)


def test_tool_turns_are_refused_per_prompt_with_the_reason(tmp_path, openai_server):
    srv = openai_server(shape="vllm")
    root = conversation_root(tmp_path, 6, {"base_url": srv.url}, tools_at=(2,))
    assert run(root).returncode == 0
    assert sorted(r["index"] for r in records(root, "MT")) == [0, 1, 3, 4, 5]
    err = [json.loads(x) for x in (root / "data/outputs/MT.errors.jsonl").read_text().splitlines()]
    assert [e["index"] for e in err] == [2]
    assert "tool calls" in err[0]["error"] and "turns: last" in err[0]["error"]
    assert "conversation 2 " not in json.dumps(srv.bodies)  # never sent


def test_kill_9_mid_conversation_does_not_ask_finished_turns_again(tmp_path, openai_server):
    srv = openai_server(shape="vllm", latency=0.15)
    root = conversation_root(tmp_path, 40, {"base_url": srv.url, "concurrency": 8})
    partial = outputs(root) / "MT.partial.jsonl"
    proc = subprocess.Popen(runner_cmd(root), cwd=REPO)
    try:
        wait_for(
            lambda: partial.exists() and len(partial.read_text().splitlines()) >= 10,
            timeout=60,
            what="finished turns in the sidecar",
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    kept = [json.loads(x) for x in partial.read_text().splitlines()]
    before = len(srv.bodies)
    assert before < 120 and kept
    assert run(root, timeout=120).returncode == 0
    recs = records(root, "MT")
    assert sorted(r["index"] for r in recs) == list(range(40))  # each once
    by_conv = asked(srv)
    for e in kept:  # a turn in the sidecar at the kill was asked exactly once, ever
        i = int(e["id"].split("-")[1])
        turn_k = [m for m in by_conv[f"conversation {i}"] if len(m) == 2 + 2 * e["turn"]]
        assert len(turn_k) == 1, (e["id"], e["turn"])
    for r in recs:  # and what was kept is what the record holds
        for e in kept:
            if e["id"] == r["id"]:
                got = r["conversations"][2 + 2 * e["turn"]]
                assert got["content"] == e["reply"]["content"]
    assert len(srv.bodies) - 120 <= 8  # at most the requests in flight at the kill, again


def test_a_conversation_stays_on_the_server_that_answered_it(tmp_path, openai_server):
    a = openai_server(shape="vllm", latency=0.02)
    b = openai_server(shape="vllm", latency=0.02)
    root = conversation_root(tmp_path, 30, {"base_urls": [a.url, b.url], "concurrency": 4})
    assert run(root).returncode == 0
    assert len(records(root, "MT")) == 30
    on_a, on_b = asked(a), asked(b)
    assert on_a and on_b  # both served
    assert not set(on_a) & set(on_b)  # no conversation split between them
    assert all(len(v) == 3 for v in [*on_a.values(), *on_b.values()])
