"""`simulate`: a built-in stand-in for an engine, for the demo on the `local` host (no model)."""

from __future__ import annotations

import asyncio
import math
import random
import time
from pathlib import Path

from ...common.records import Reply
from ..hidden import hsfile
from . import meter
from .client import Engine
from .kept_tokens import Keeping

_WORDS = (
    "the model answers with a long and careful response that walks through each step of the "
    "reasoning before it gives the final result so that a draft model can learn"
).split()


class SimulateEngine(Engine):
    """Answers like a continuous-batching server: a shared token rate split over the requests in
    flight, long-tailed response lengths around each dataset's est_tokens. A demo, never a fallback."""

    model = "simulated"
    base_urls = ["simulate"]

    LAYERS, HIDDEN = 4, 16  # a small model's shape: the stand-in's files stay a few KB

    def __init__(self, job):
        engine, sampling = job.engine, job.sampling
        self.tokens_per_s = engine.tokens_per_s
        self.concurrency = engine.concurrency
        self.max_tokens = int(sampling.get("max_tokens", 8192))
        self.thinking = bool(job.chat_template_kwargs.get("thinking"))
        self.token_ids = bool(job.extra_body.get("return_token_ids"))  # as vLLM: only when asked

    def length(self, est_tokens: int, key: str) -> int:
        rng = random.Random(key)
        sigma = 0.6
        mu = math.log(max(est_tokens, 1)) - sigma * sigma / 2  # lognormal with mean est_tokens
        return max(8, int(rng.lognormvariate(mu, sigma)))

    async def probe(self, url: str) -> str | None:
        return None  # no server to ask

    async def complete(
        self, url: str, messages: list, est_tokens: int, key: str, keep: Keeping | None = None
    ) -> Reply:
        n = self.length(est_tokens, key)
        finish = "stop"
        if n >= self.max_tokens:
            n, finish = self.max_tokens, "length"
        per_seq = self.tokens_per_s / max(1, self.concurrency)
        if (flow := meter.current()) is not None:  # as a stream would be seen: a token at a time
            flow.simulate(time.time(), n, per_seq)
        await asyncio.sleep(n / per_seq)
        words = [_WORDS[i % len(_WORDS)] for i in range(n)]
        reasoning = " ".join(words[: max(1, n // 4)]) if self.thinking else None
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        reply = Reply(" ".join(words), reasoning, finish, prompt_tokens, n, self.model)
        if self.token_ids:  # a word is a token: its place in the stand-in's vocabulary
            prompt = [w for m in messages for w in str(m.get("content", "")).split()]
            reply.prompt_token_ids = [1 + sum(map(ord, w)) % 1000 for w in prompt] or [1]
            reply.token_ids = [1000 + i % len(_WORDS) for i in range(n)]
        return reply

    async def hidden_states(self, url: str, input_ids: list[int], key: str, incoming: Path) -> Path:
        """A file shaped as vLLM's extraction writes it: finite values made from the token ids,
        written at the stand-in's prefill rate (ten times its decode rate)."""
        await asyncio.sleep(len(input_ids) / (10 * self.tokens_per_s / max(1, self.concurrency)))
        per = self.LAYERS * self.HIDDEN
        # BF16, little-endian: a high byte under 0x7F is a finite value
        hidden = bytes((t + i) % 0x7F for t in input_ids for i in range(2 * per))
        path = incoming / f"{key}.safetensors"
        hsfile.write(path, input_ids, hidden, self.LAYERS, "BF16")
        return path
