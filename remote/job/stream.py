"""A streamed answer (server-sent events), read with two deadlines and put back together into the
body a non-streamed answer has, so both make the same record."""

from __future__ import annotations

import asyncio
import json


class NoProgress(Exception):
    """Nothing arrived within the deadline: the request is stuck (a dead data-parallel rank behind
    the server, a dropped request, a half-open connection)."""


class Assembly:
    """The deltas of one answer: content, thinking (`reasoning` or `reasoning_content`), token ids,
    finish_reason, usage."""

    def __init__(self):
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.token_ids: list | None = None
        self.prompt_token_ids: list | None = None
        self.finish_reason = None
        self.usage: dict | None = None
        self.model = None

    def add(self, chunk: dict) -> None:
        if chunk.get("error"):  # vLLM reports an engine error inside the stream
            raise ValueError(f"error in the stream: {str(chunk['error'])[:200]}")
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("prompt_token_ids"), list):
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            for key, into in (
                ("content", self.content),
                ("reasoning", self.reasoning),
                ("reasoning_content", self.reasoning),
            ):
                if isinstance(delta.get(key), str):
                    into.append(delta[key])
            if isinstance(choice.get("token_ids"), list):
                self.token_ids = (self.token_ids or []) + choice["token_ids"]
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def reply(self) -> dict:
        """What the non-streamed answer's body would have been (null where nothing came)."""
        if self.finish_reason is None:
            raise ValueError("the stream ended without a finish_reason")
        return {
            "model": self.model,
            "choices": [
                {
                    "message": {
                        "content": "".join(self.content) or None,
                        "reasoning": "".join(self.reasoning) or None,
                    },
                    "finish_reason": self.finish_reason,
                    "token_ids": self.token_ids,
                }
            ],
            "usage": self.usage or {},
            "prompt_token_ids": self.prompt_token_ids,
        }


async def read_stream(content, first_token_timeout: float, progress_timeout: float) -> dict:
    """Read `data:` events from an aiohttp StreamReader until [DONE]. The first event must come within
    first_token_timeout (a request may rightly wait in the server's queue), each later one within
    progress_timeout; else NoProgress."""
    got = Assembly()
    deadline, first = first_token_timeout, True
    while True:
        try:
            line = await asyncio.wait_for(content.readline(), timeout=deadline)
        except asyncio.TimeoutError:
            what = "no first token" if first else "no new token"
            raise NoProgress(f"{what} for {deadline:g}s") from None
        if not line:
            raise ValueError("the stream ended before [DONE]")
        line = line.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, comments, event names
        data = line[5:].strip()
        if data == b"[DONE]":
            return got.reply()
        got.add(json.loads(data))
        deadline, first = progress_timeout, False
