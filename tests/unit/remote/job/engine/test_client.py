"""A reply as current vLLM sends it (tests/openai_server.py `shape="vllm"`) and as older servers did,
read field by field; only a body without usable choices is malformed."""

from __future__ import annotations

import json

import pytest

from remote.job.engine.client import parse_reply
from tests.openai_server import FakeOpenAI


def vllm_body(**overrides) -> dict:
    srv = FakeOpenAI(shape="vllm", cut_in_thinking=1.0)
    body = srv.reply(
        {"model": "m", "max_tokens": 8192, "chat_template_kwargs": {"thinking": True}}, "k", 100, 12
    )
    body["choices"][0]["message"].update(overrides)
    return body


def test_vllm_reply_cut_inside_thinking_is_an_answer():
    body = vllm_body()
    msg = body["choices"][0]["message"]
    # vLLM >= 0.16
    assert msg["content"] is None and "reasoning_content" not in msg and "tool_calls" not in msg
    c = parse_reply(json.loads(json.dumps(body)), "m")
    assert c.content == "" and c.reasoning_content.startswith("thinking for 8192 tokens")
    assert c.finish_reason == "length" and c.completion_tokens == 8192 and c.prompt_tokens == 12
    assert c.token_ids is None and c.prompt_token_ids is None


def test_reasoning_from_whichever_field_holds_text():
    assert (
        parse_reply(vllm_body(reasoning=None, reasoning_content="old"), "m").reasoning_content
        == "old"
    )
    assert (
        parse_reply(vllm_body(reasoning="new", reasoning_content=None), "m").reasoning_content
        == "new"
    )
    assert parse_reply(vllm_body(reasoning="", content="hi"), "m").reasoning_content is None
    classic = FakeOpenAI(shape="classic").reply(
        {"chat_template_kwargs": {"thinking": True}}, "k", 5, 1
    )
    c = parse_reply(classic, "m")
    assert c.reasoning_content == "thinking" and c.content == "answer with 5 tokens"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"choices": []},
        {"choices": [None]},
        {"choices": [{"index": 0}]},
        {"choices": [{"message": {"content": 5}}]},
        [],
    ],
)
def test_only_a_body_without_usable_choices_is_malformed(body):
    with pytest.raises((ValueError, TypeError)):
        parse_reply(body, "m")


def test_every_stage_asks_an_item_again_by_one_rule():
    """A slow engine: a backoff, longer each time, then the item fails past max_retries; a server
    gone under it (down, stuck): at once, once it is back, then fails past max_requeues."""
    from remote.common.jobspec import EngineSpec
    from remote.job.engine.client import EngineDown, Stuck, TransientError, next_try

    eng = EngineSpec(max_retries=2, retry_base=1.0)
    waits = [next_try(TransientError("slow"), n, eng) for n in (1, 2, 3)]
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0 and waits[2] is None
    for e in (EngineDown("refused"), Stuck("no token for 300s")):
        assert next_try(e, eng.max_requeues, eng) == 0.0
        assert next_try(e, eng.max_requeues + 1, eng) is None
