"""The stand-in engine: long-tailed lengths around est_tokens, the same for the same prompt, cut at
max_tokens, thinking only when the chat template asks for it."""

from __future__ import annotations

import asyncio
import statistics
from types import SimpleNamespace

from remote.job.engine.simulate import SimulateEngine


def job(max_tokens=8192, thinking=True, tokens_per_s=1e9, token_ids=False):
    return SimpleNamespace(
        engine=SimpleNamespace(tokens_per_s=tokens_per_s, concurrency=4),
        sampling={"max_tokens": max_tokens},
        chat_template_kwargs={"thinking": thinking},
        extra_body={"return_token_ids": True} if token_ids else {},
    )


def test_lengths_average_est_tokens_and_repeat_per_prompt():
    e = SimulateEngine(job())
    lengths = [e.length(400, f"B1-{i}") for i in range(2000)]
    assert 360 < statistics.mean(lengths) < 440 and min(lengths) >= 8
    assert max(lengths) > 2 * 400  # a long tail
    assert e.length(400, "B1-7") == e.length(400, "B1-7")


def test_an_answer_past_max_tokens_is_cut_there():
    e = SimulateEngine(job(max_tokens=16))
    msgs = [{"role": "user", "content": "three words here"}]
    c = asyncio.run(e.complete("simulate", msgs, est_tokens=5000, key="k"))
    assert (c.completion_tokens, c.finish_reason, c.prompt_tokens) == (16, "length", 3)
    assert c.reasoning_content and c.model == "simulated"
    plain = asyncio.run(SimulateEngine(job(thinking=False)).complete("simulate", msgs, 50, "k"))
    assert plain.reasoning_content is None and plain.finish_reason == "stop"


def test_token_ids_only_when_asked_and_hidden_states_shaped_as_vllm_writes_them(tmp_path):
    import asyncio

    from remote.job.hidden import hsfile

    msgs = [{"role": "user", "content": "two words"}]
    plain = asyncio.run(SimulateEngine(job()).complete("simulate", msgs, 20, "k"))
    assert plain.token_ids is None and plain.prompt_token_ids is None  # as vLLM: not asked
    e = SimulateEngine(job(token_ids=True))
    r = asyncio.run(e.complete("simulate", msgs, 20, "k"))
    assert len(r.prompt_token_ids) == 2 and len(r.token_ids) == r.completion_tokens
    ids = r.prompt_token_ids + r.token_ids
    path = asyncio.run(e.hidden_states("simulate", ids, "row", tmp_path))
    got = hsfile.check(path, ids, e.LAYERS)
    assert (got.tokens, got.hidden, got.dtype) == (len(ids), e.HIDDEN, "BF16")
