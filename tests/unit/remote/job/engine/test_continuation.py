"""Continuing an unfinished answer: refused where it would change what is sampled, the completions
request that continues it (allowance, min_tokens and seed moved past the kept part), one merged answer."""

from __future__ import annotations

from types import SimpleNamespace

from remote.job.engine import continuation
from remote.job.engine.continuation import body, merged, why_not, why_not_keep
from remote.job.engine.kept_tokens import Kept


def job(kind="openai", stream=True, extra=None, sampling=None):
    return SimpleNamespace(
        engine=SimpleNamespace(kind=kind, stream=stream),
        extra_body={"return_token_ids": True} if extra is None else extra,
        sampling=sampling or {"temperature": 1.0, "top_p": 0.95},
    )


def test_sampling_that_reads_its_own_tokens_or_spans_the_cut_is_named():
    assert why_not({"temperature": 1.0, "seed": 3, "response_format": {"type": "text"}}) is None
    why = why_not({"presence_penalty": 0.5, "stop": ["\n\n"], "thinking_token_budget": 0, "n": 2})
    assert "presence_penalty" in why and "stop" in why and "thinking_token_budget" in why
    assert "n > 1" in why
    assert "structured output" in why_not({"response_format": {"type": "json_object"}})


def test_why_tokens_are_not_kept_says_what_would_keep_them():
    assert why_not_keep(job()) is None
    assert "stand-in" in why_not_keep(job(kind="simulate"))
    assert "return_token_ids: true" in why_not_keep(job(extra={}))
    assert "stream is false" in why_not_keep(job(stream=False))
    assert "would change what is sampled" in why_not_keep(job(sampling={"frequency_penalty": 1}))


def test_the_request_continues_from_the_kept_tokens():
    fixed = {
        "model": "m",
        "messages": [{"role": "user"}],
        "chat_template_kwargs": {},
        "seed": 7,
        "max_tokens": 100,
        "min_tokens": 5,
        "temperature": 1.0,
    }
    kept = Kept("s", prompt_ids=[1, 2], ids=[3, 4, 5])
    b = body(fixed, kept, seed_key="B1-000001")
    assert b["prompt"] == [1, 2, 3, 4, 5] and b["return_token_ids"] is True
    assert "messages" not in b and "chat_template_kwargs" not in b
    assert (b["max_tokens"], b["min_tokens"], b["temperature"]) == (97, 2, 1.0)
    assert b["seed"] != 7 and b["seed"] == body(fixed, kept, "B1-000001")["seed"]  # fresh, fixed
    assert body(dict(fixed, max_tokens=3), kept, "k") is None  # the allowance is used up
    assert body(fixed, Kept("s", [1], [3], finish="stop"), "k") is None  # it had ended


def test_one_answer_from_the_kept_part_and_the_reply():
    kept = Kept("s", [1, 2], [3, 4], reasoning="thin", content="", parts=1)
    reply = {
        "choices": [
            {
                "message": {"reasoning": "king", "content": "42"},
                "finish_reason": "stop",
                "token_ids": [5, 6, 7],
            }
        ],
        "usage": {"completion_tokens": 3},
    }
    m = merged(kept, reply)
    assert (m.reasoning_content, m.content, m.finish_reason) == ("thinking", "42", "stop")
    assert m.token_ids == [3, 4, 5, 6, 7] and m.completion_tokens == 5
    assert (m.prompt_tokens, m.continued) == (2, 2)
    used_up = merged(kept, None)
    assert used_up.finish_reason == "length" and used_up.token_ids == [3, 4]


def test_no_kept_file_says_why_once(tmp_path):
    logged = []
    kept, why = continuation.keeping(job(stream=False), tmp_path / "kept.jsonl", {}, logged.append)
    assert kept is None and "stream is false" in why and len(logged) == 1
    assert continuation.kept_status(None, why).why_not == why
