"""Continuing an unfinished answer from its kept tokens: when it may be done without
changing what is sampled, the `/v1/completions` request that does it, and the one record it makes
with the kept part."""

from __future__ import annotations

import hashlib
import time

from ...common.records import Reply
from ...common.status import KeptStatus
from .kept_tokens import Kept, KeptFile, open_kept

# Fields only a chat request has: a token-id prompt is already rendered.
CHAT_ONLY = (
    "messages",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "include_reasoning",
    "mm_processor_kwargs",
)
# Sampling that reads the answer's own earlier tokens, or a shape that spans the cut: a
# continuation would see the kept part as prompt, so it would sample differently.
_OUTPUT_PENALTIES = ("presence_penalty", "frequency_penalty", "repetition_detection")
_SPANS_THE_CUT = ("no_repeat_ngram_size", "stop", "bad_words", "thinking_token_budget")
_STRUCTURED = (
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "logits_processors",
)


def why_not(settings: dict) -> str | None:
    """Why continuing would change what is sampled under these settings (None: it would not)."""
    found = []
    for key in _OUTPUT_PENALTIES:
        if settings.get(key):
            found.append(f"{key} (it reads the answer's own tokens only)")
    for key in _SPANS_THE_CUT:
        v = settings.get(key)
        if v or (key == "thinking_token_budget" and v is not None):  # a budget of 0 too
            found.append(f"{key} (it would not see across the cut)")
    for key in _STRUCTURED:
        if settings.get(key) and not (key == "response_format" and _plain(settings[key])):
            found.append(f"{key} (structured output starts from the answer's first token)")
    if int(settings.get("n") or 1) > 1:
        found.append("n > 1")
    return "; ".join(found) or None


def why_not_keep(job) -> str | None:
    """Why unfinished answers' tokens are not kept (a restart asks them again from their first
    token), and what would keep them; None: they are kept."""
    if job.engine.kind != "openai":
        return "the simulate engine is a stand-in that answers each prompt whole: it streams nothing to keep"
    if not job.extra_body.get("return_token_ids"):
        return "set job.extra_body.return_token_ids: true (vLLM) to keep them"
    if not job.engine.stream:
        return "job.engine.stream is false: set it true to keep them as they stream"
    why = why_not({**job.sampling, **job.extra_body})
    return f"continuing would change what is sampled: {why}" if why else None


def _plain(fmt) -> bool:
    return isinstance(fmt, dict) and fmt.get("type") == "text"


def max_tokens(settings: dict) -> int | None:
    v = settings.get("max_tokens", settings.get("max_completion_tokens"))
    return int(v) if v is not None else None


def body(fixed: dict, kept: Kept, seed_key: str) -> dict | None:
    """The completions request for `kept` (fixed: what every chat request carries); None when the
    kept part already used the whole token allowance, or had ended (its stream broke after it)."""
    if kept.finish:
        return None
    b = {k: v for k, v in fixed.items() if k not in CHAT_ONLY and k != "max_completion_tokens"}
    b["prompt"] = list(kept.prompt_ids) + list(kept.ids)
    b["return_token_ids"] = True
    made = len(kept.ids)
    limit = max_tokens(fixed)
    if limit is not None:
        if limit - made <= 0:
            return None
        b["max_tokens"] = limit - made
    if fixed.get("min_tokens"):
        b["min_tokens"] = max(0, int(fixed["min_tokens"]) - made)
    if fixed.get("seed") is not None:  # a fresh seed: the first part's would replay its draws
        salt = int(hashlib.sha256(f"{seed_key}:{made}".encode()).hexdigest()[:8], 16)
        b["seed"] = (int(fixed["seed"]) * 1_000_003 + salt) % (2**31)
    return b


def merged(kept: Kept, reply: dict | None, model: str = "") -> Reply:
    """The whole answer: the kept part followed by the continuation's reply body (None: the kept
    part had used every allowed token)."""
    if reply is None:
        ids, r, c, finish, made = [], "", "", kept.finish or "length", 0
    else:
        choice = reply["choices"][0]
        ids = choice.get("token_ids") or []
        r = choice["message"].get("reasoning") or ""
        c = choice["message"].get("content") or ""
        finish = choice.get("finish_reason")
        made = int((reply.get("usage") or {}).get("completion_tokens") or len(ids))
    return Reply(
        content=kept.content + c,
        reasoning_content=(kept.reasoning + r) or None,
        finish_reason=finish,
        prompt_tokens=len(kept.prompt_ids),
        completion_tokens=len(kept.ids) + made,
        model=model,
        prompt_token_ids=list(kept.prompt_ids),
        token_ids=list(kept.ids) + list(ids),
        continued=kept.parts + 1,
    )


def keeping(job, path, runs: dict, log) -> tuple[KeptFile | None, str | None]:
    """The kept file of this start, or why there is none (said once in the log)."""
    why = why_not_keep(job)
    if why:
        log(f"in-flight answers are asked again from their start after a stop: {why}")
        return None, why
    return open_kept(path, runs, log), None


def kept_status(dispatcher, why_not: str | None) -> KeptStatus:
    d = dispatcher
    if d is None:
        return KeptStatus(on=False, why_not=why_not)
    if d.kept is None:  # what streams is said all the same: plan reckons its ETAs at it, as status
        return KeptStatus(on=False, why_not=why_not, streamed_per_s=d.meter.per_s(time.time()))
    st = d.kept.status(d.continued, d.tokens_saved, d.started_over)
    st.why_not, st.streamed_per_s = d.no_token_ids, d.meter.per_s(time.time())
    return st
