"""A real HTTP server speaking the OpenAI chat-completions API, with injectable latency and failures.

Two reply shapes: `classic` (older vLLM, SGLang: thinking in `reasoning_content`, unset fields left
out) and `vllm`, byte for byte what current vLLM (>= 0.16) serializes, after
vllm/entrypoints/openai/chat_completion/protocol.py: every field present, `null` where unset, the
thinking in `message.reasoning`, `tool_calls` left out when empty, `stop_reason`, `token_ids` and
`prompt_token_ids` (lists only with `return_token_ids`), `usage.prompt_tokens_details`. An answer cut
by `max_tokens` inside its thinking has `content: null` and `finish_reason: "length"`. `/metrics`
speaks vLLM's Prometheus names with `model_name` and `engine` labels, one series per engine.

Used by the tests and benchmarks (127.0.0.1 only). Runs in a thread (`FakeOpenAI().start()`) or as
`python -m tests.openai_server --port N`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import random
import threading
import time
from pathlib import Path

from aiohttp import web


def _words(text: str | None) -> list[str]:
    """A text in pieces that join back to exactly it (each piece keeps its leading space)."""
    if not text:
        return []
    words = text.split(" ")
    return [words[0]] + [" " + w for w in words[1:]]


class FakeOpenAI:
    def __init__(
        self,
        *,
        latency: float = 0.0,
        fail_rate: float = 0.0,
        rate_limit_rate: float = 0.0,
        hang_rate: float = 0.0,
        malformed_rate: float = 0.0,
        bad_request_ids: set[str] | None = None,
        tokens: int | None = None,
        seed: int = 0,
        model: str = "test-model",
        slots: int | None = None,
        token_time: float = 0.0,
        shape: str = "classic",
        cut_in_thinking: float = 0.0,
        engines: int = 1,
        strict_model: bool = False,
        stall_rate: float = 0.0,
        token_model: bool = False,
        chunk_tokens: int = 1,
        spec_decode: tuple[int, dict[str, int]] | None = None,
    ):
        self.latency = latency
        self.fail_rate, self.rate_limit_rate = fail_rate, rate_limit_rate
        self.hang_rate, self.malformed_rate = hang_rate, malformed_rate
        self.bad_request_ids = bad_request_ids or set()
        self.tokens = tokens
        self.rng = random.Random(seed)
        self.model = model
        # continuous batching: fixed batch slots
        self.slots = asyncio.Semaphore(slots) if slots else None
        self.token_time = token_time  # seconds per output token inside a slot
        assert shape in ("classic", "vllm"), shape
        self.shape = shape
        self.cut_in_thinking = (
            cut_in_thinking  # share of prompts (fixed per prompt) cut by max_tokens while thinking
        )
        self.engines = engines  # data-parallel engines reported in /metrics
        self.strict_model = strict_model  # another model name is vLLM's 404, as in real vLLM
        # streamed answers only: share that send a few tokens, then nothing, the connection open
        # (a request routed to a dead data-parallel rank hangs before its first token: hang_rate)
        self.stall_rate = stall_rate
        self.stalled = 0
        self.hung = 0  # requests hung by hang_rate
        # a model made of token ids (see TokenModel): /v1/completions continues from them
        self.tokens_model = TokenModel() if token_model else None
        self.chunk_tokens = chunk_tokens  # tokens per streamed chunk (vLLM merges them under load)
        self.completion_bodies: list[dict] = []
        self.long_text = False  # an answer of n words for n tokens (one streamed chunk per token)
        self.slot_count = slots
        self.generated_tokens = 0
        # a server with a draft: (k tokens a draft, {text in the prompt: tokens accepted a draft}),
        # its spec-decode counters in /metrics (a prompt matching none accepts none)
        self.spec_decode = spec_decode
        self.spec = [0, 0, 0, [0] * (spec_decode[0] if spec_decode else 0)]
        self.bodies: list[dict] = []  # every request body, as received
        # (start, end) of each request in a batch slot
        self.slot_intervals: list[tuple[float, float]] = []
        self.t_last_arrival: float | None = None
        # prompt text -> times answered OK
        self.requests: collections.Counter = collections.Counter()
        self.attempts: collections.Counter = collections.Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        # requests after the first `hold_after` wait until it is raised or set to None: a job a test
        # stops while it runs outlasts the test by construction, however slow the machine
        self.hold_after: int | None = None
        # a held streamed request is a live stream with no token in it (an SSE comment every 0.2 s),
        # not a hang: a job with a short progress deadline is held without a request going stuck.
        # For streamed jobs with no injected errors (an error cannot follow a started stream)
        self.hold_alive = False
        self.arrived = 0
        self.hold_while: Path | None = (
            None  # (as its own process) new requests wait while it exists
        )
        self.busy_slot_time = 0.0
        self.t_first: float | None = (
            None  # first request in, last answer out: measured throughput window
        )
        self.t_last: float | None = None
        self.lengths = None  # optional callable(key) -> output tokens (e.g. long-tailed)
        self.port = 0
        self._loop = None
        self._runner = None
        self._thread = None

    @staticmethod
    def prompt_key(body: dict) -> str:
        return json.dumps(body.get("messages"), sort_keys=True)

    def tokens_for(self, key: str) -> int:
        if self.lengths is not None:
            return self.lengths(key)
        if self.tokens is not None:
            return self.tokens
        return 50 + int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 200

    async def models(self, request):
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        )

    async def chat(self, request):
        body = await request.json()
        self.bodies.append(body)
        if self.strict_model and body.get("model") != self.model:
            msg = f"The model `{body.get('model')}` does not exist. Valid aliases: {self.model}."
            err = {"message": msg, "type": "NotFoundError", "param": "model", "code": 404}
            return web.json_response({"error": err}, status=404)
        self.t_last_arrival = time.monotonic()
        if self.t_first is None:
            self.t_first = self.t_last_arrival
        key = self.prompt_key(body)
        self.attempts[key] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        me, self.arrived = self.arrived, self.arrived + 1
        resp, alive_at = None, 0.0
        try:
            while (self.hold_after is not None and me >= self.hold_after) or (
                self.hold_while is not None and self.hold_while.exists()
            ):
                if self.hold_alive and body.get("stream") and time.monotonic() - alive_at >= 0.2:
                    resp = resp or await self.open_stream(request)
                    await resp.write(b": held\n\n")
                    alive_at = time.monotonic()
                await asyncio.sleep(0.02)
            text = json.dumps(body.get("messages"))
            if any(bad in text for bad in self.bad_request_ids):
                return web.json_response({"error": {"message": "prompt too long"}}, status=400)
            roll = self.rng.random()
            if roll < self.fail_rate:
                return web.json_response({"error": {"message": "injected 500"}}, status=500)
            roll -= self.fail_rate
            if roll < self.rate_limit_rate:
                return web.json_response({"error": {"message": "slow down"}}, status=429)
            roll -= self.rate_limit_rate
            if roll < self.hang_rate:
                self.hung += 1
                await asyncio.sleep(3600)
            roll -= self.hang_rate
            n = self.tokens_for(key)
            if self.slots is not None:
                async with self.slots:
                    t0 = time.monotonic()
                    await asyncio.sleep(self.latency + n * self.token_time)
                    t1 = time.monotonic()
                    self.busy_slot_time += t1 - t0
                    self.slot_intervals.append((t0, t1))
            elif self.latency:
                await asyncio.sleep(self.latency)
            if roll < self.malformed_rate:
                return web.Response(text='{"choices": [', content_type="application/json")
            if self.tokens_model is not None:
                return await self.token_answer(request, body, key, n)
            reply = self.reply(body, key, n, len(text) // 4)
            if body.get("stream"):
                return await self.stream(request, body, key, reply, resp)
            self.requests[key] += 1
            self.t_last = time.monotonic()
            return web.json_response(reply)
        finally:
            self.in_flight -= 1

    @staticmethod
    async def open_stream(request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        return resp

    async def stream(self, request, body: dict, key: str, reply: dict, resp=None):
        """The same answer as server-sent events, one chunk per token, as vLLM streams it: deltas of
        `reasoning` (or `reasoning_content`) then `content`, `token_ids` per chunk, `prompt_token_ids`
        on the first, `finish_reason` on the last, then (with include_usage) a usage chunk. `resp`: the
        stream a hold already started."""
        resp = resp or await self.open_stream(request)
        choice, msg = reply["choices"][0], reply["choices"][0]["message"]
        think_key = "reasoning" if self.shape == "vllm" else "reasoning_content"
        ids = choice.get("token_ids")
        pieces = [(think_key, w) for w in _words(msg.get(think_key))]
        pieces += [("content", w) for w in _words(msg.get("content"))]
        stall = body.get("stream") and self.rng.random() < self.stall_rate

        async def send(obj) -> None:
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        head = {"id": reply["id"], "object": "chat.completion.chunk", "model": reply["model"]}
        first = dict(head, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}])
        if ids is not None:
            first["prompt_token_ids"] = reply.get("prompt_token_ids")
        await send(first)
        per = len(ids) // max(1, len(pieces)) if ids else 0
        for i, (field, text) in enumerate(pieces):
            part = ids[i * per : (i + 1) * per if i < len(pieces) - 1 else None] if ids else None
            delta = {"index": 0, "delta": {field: text}, "finish_reason": None}
            if part is not None:
                delta["token_ids"] = part
            await send(dict(head, choices=[delta]))
            if stall and i == 1:
                self.stalled += 1
                await asyncio.sleep(3600)  # tokens stop, the connection stays open
        last = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
        await send(dict(head, choices=[last]))
        if (body.get("stream_options") or {}).get("include_usage"):
            await send(dict(head, choices=[], usage=reply["usage"]))
        await resp.write(b"data: [DONE]\n\n")
        self.requests[key] += 1
        self.t_last = time.monotonic()
        await resp.write_eof()
        return resp

    def occupancy(self, start: float, end: float) -> float:
        """Share of the batch slots busy between start and end (monotonic clock)."""
        if not self.slot_count or end <= start:
            return 0.0
        busy = sum(max(0.0, min(t1, end) - max(t0, start)) for t0, t1 in self.slot_intervals)
        return busy / (self.slot_count * (end - start))

    def is_cut(self, key: str) -> bool:
        h = int(hashlib.sha256(b"cut" + key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return h < self.cut_in_thinking

    def reply(self, body: dict, key: str, n: int, prompt_tokens: int) -> dict:
        thinking = bool((body.get("chat_template_kwargs") or {}).get("thinking"))
        content, reasoning, finish = (
            " ".join(["tok"] * n) if self.long_text else f"answer with {n} tokens",
            "thinking" if thinking else None,
            "stop",
        )
        if thinking and self.is_cut(key):  # max_tokens ran out before the thinking ended
            n = int(body.get("max_tokens") or n)
            content, reasoning, finish = None, f"thinking for {n} tokens and still going", "length"
        self.generated_tokens += n
        self.drafted(key, n)
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + n,
            "completion_tokens": n,
        }
        ids = bool(body.get("return_token_ids"))
        if self.shape == "classic":
            return {
                "id": f"cmpl-{self.rng.getrandbits(32):x}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", self.model),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "reasoning_content": reasoning,
                        },
                    }
                ],
                "usage": usage,
            }
        return {  # field for field, in order, as vLLM's ChatCompletionResponse serializes
            "id": f"chatcmpl-{self.rng.getrandbits(64):016x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "refusal": None,
                        "annotations": None,
                        "audio": None,
                        "function_call": None,
                        "reasoning": reasoning,
                    },
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                    "token_ids": list(range(1000, 1000 + n)) if ids else None,
                    "routed_experts": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": dict(usage, prompt_tokens_details=None),
            "prompt_logprobs": None,
            "prompt_token_ids": list(range(prompt_tokens)) if ids else None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }

    async def metrics(self, request):
        """vLLM's Prometheus series, one per engine (data parallel), split as vLLM would report them."""
        slots = self.slot_count or 10**9
        running_total = min(self.in_flight, slots)
        waiting_total = self.in_flight - running_total
        lines = []

        def series(name, kind, per_engine):
            lines.append(f"# HELP {name} {name}.")
            lines.append(f"# TYPE {name} {kind}")
            for e, v in enumerate(per_engine):
                lines.append(f'{name}{{engine="{e}",model_name="{self.model}"}} {float(v)}')

        def split(v):
            return [
                v // self.engines + (1 if i < v % self.engines else 0) for i in range(self.engines)
            ]

        series("vllm:num_requests_running", "gauge", split(running_total))
        series("vllm:num_requests_waiting", "gauge", split(waiting_total))
        per_engine_slots = max(1, slots // self.engines) if self.slot_count else 10**9
        series(
            "vllm:kv_cache_usage_perc",
            "gauge",
            [min(1.0, r / per_engine_slots) for r in split(running_total)],
        )
        series("vllm:num_preemptions_total", "counter", [0] * self.engines)
        series("vllm:generation_tokens_total", "counter", split(self.generated_tokens))
        if self.spec_decode:
            series("vllm:spec_decode_num_drafts_total", "counter", [self.spec[0]])
            series("vllm:spec_decode_num_draft_tokens_total", "counter", [self.spec[1]])
            series("vllm:spec_decode_num_accepted_tokens_total", "counter", [self.spec[2]])
            name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            for i, v in enumerate(self.spec[3]):
                lines.append(
                    f'{name}{{engine="0",model_name="{self.model}",position="{i}"}} {float(v)}'
                )
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def drafted(self, key: str, n: int) -> None:
        """What a server decoding with a draft counts for an answer of n tokens: each target step
        makes its own token and the j accepted of the draft's k."""
        if not self.spec_decode:
            return
        k, accepts = self.spec_decode
        j = next((a for text, a in accepts.items() if text in key), 0)
        drafts = -(-n // (1 + j))
        self.spec[0] += drafts
        self.spec[1] += drafts * k
        self.spec[2] += drafts * j
        for i in range(j):
            self.spec[3][i] += drafts

    async def stats(self, request):
        """What this server has seen, for tests that run it as a separate process."""
        return web.json_response(
            {
                "answered": sum(self.requests.values()),
                "attempts": sum(self.attempts.values()),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
            }
        )

    async def token_answer(self, request, body: dict, key: str, n: int):
        """A chat answer of the token model, streamed in chunks of chunk_tokens as vLLM does."""
        tm = self.tokens_model
        thinking = bool((body.get("chat_template_kwargs") or {}).get("thinking"))
        prompt = tm.prompt_ids(key, thinking)
        ids, finish = tm.cut(tm.answer(key, n, thinking), body.get("max_tokens"))
        skip = body.get("skip_special_tokens", True)
        parts = self.chunks(ids)
        deltas, seen = [], []
        for part in parts:  # vLLM's BaseThinkingReasoningParser, line for line
            deltas.append(
                tm.parse_delta(seen, part, skip, thinking, finish == "stop" and part is parts[-1])
            )
            seen += part
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt) + len(ids),
        }
        if not body.get("stream"):
            self.generated_tokens += len(ids)
            r = "".join(d.get("reasoning") or "" for d in deltas) or None
            c = "".join(d.get("content") or "" for d in deltas) or None
            self.requests[key] += 1
            return web.json_response(
                {
                    "id": "chatcmpl-t",
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": c, "reasoning": r},
                            "finish_reason": finish,
                            "token_ids": ids,
                        }
                    ],
                    "usage": usage,
                    "prompt_token_ids": prompt,
                }
            )
        head = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": body.get("model")}
        chunks = [
            dict(
                head,
                prompt_token_ids=prompt,
                choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            )
        ]
        for i, (part, d) in enumerate(zip(parts, deltas)):
            last = i == len(parts) - 1
            chunks.append(
                dict(
                    head,
                    choices=[
                        {
                            "index": 0,
                            "delta": d,
                            "token_ids": part,
                            "finish_reason": finish if last else None,
                        }
                    ],
                )
            )
        return await self.send_chunks(
            request, body, key, chunks, dict(head, choices=[], usage=usage)
        )

    def chunks(self, ids: list) -> list[list]:
        """Token ids as they are streamed: chunk_tokens a chunk."""
        return [ids[i : i + self.chunk_tokens] for i in range(0, len(ids), self.chunk_tokens)]

    async def send_chunks(self, request, body, key, chunks, usage_chunk):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            return await self._send_chunks(resp, body, key, chunks, usage_chunk)
        except ConnectionError:  # the client went (a kill -9): vLLM aborts the request
            return resp

    async def _send_chunks(self, resp, body, key, chunks, usage_chunk):
        for i, chunk in enumerate(chunks):
            if i and self.token_time:
                await asyncio.sleep(
                    self.token_time * len(chunk["choices"][0].get("token_ids") or ())
                )
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            # made only as it is sent, as vLLM's counter counts: a killed stream made no more
            self.generated_tokens += len(chunk["choices"][0].get("token_ids") or ())
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(b"data: " + json.dumps(usage_chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        self.requests[key] += 1
        self.t_last = time.monotonic()
        await resp.write_eof()
        return resp

    async def completions(self, request):
        """vLLM's /v1/completions with a token-id prompt: the token model continues from it."""
        body = await request.json()
        self.completion_bodies.append(body)
        self.in_flight += 1
        try:
            return await self._completions(request, body)
        finally:
            self.in_flight -= 1

    async def _completions(self, request, body: dict):
        tm = self.tokens_model
        prompt = body.get("prompt")
        found = tm.find(prompt) if tm is not None and isinstance(prompt, list) else None
        if found is None:
            return web.json_response({"error": {"message": "unknown prompt"}}, status=400)
        key, thinking, made = found
        full = tm.answer(key, self.tokens_for(key), thinking)
        if full[: len(made)] != made:
            return web.json_response({"error": {"message": "not this answer's prefix"}}, status=400)
        ids, finish = tm.cut(full[len(made) :], body.get("max_tokens"))
        skip = body.get("skip_special_tokens", True)
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt) + len(ids),
            "prompt_tokens_details": {"cached_tokens": len(prompt) - len(prompt) % 16},
        }
        head = {"id": "cmpl-t", "object": "text_completion", "model": body.get("model")}
        parts = self.chunks(ids) or [[]]
        chunks = []
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            text = tm.text(part[:-1] if last and finish == "stop" else part, skip)
            choice = {
                "index": 0,
                "text": text,
                "token_ids": part,
                "finish_reason": finish if last else None,
            }
            if i == 0:
                choice["prompt_token_ids"] = prompt
            chunks.append(dict(head, choices=[choice]))
        if not body.get("stream"):
            self.generated_tokens += len(ids)
            self.requests[key] += 1
            text = "".join(c["choices"][0]["text"] for c in chunks)
            return web.json_response(
                dict(
                    head,
                    choices=[{"index": 0, "text": text, "token_ids": ids, "finish_reason": finish}],
                    usage=usage,
                )
            )
        return await self.send_chunks(
            request, body, key, chunks, dict(head, choices=[], usage=usage)
        )

    async def tokenize(self, request):
        body = await request.json()
        if body.get("prompt") == TokenModel.END_TEXT:
            return web.json_response({"tokens": [TokenModel.END], "count": 1})
        return web.json_response({"tokens": [1, 2], "count": 2})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        if self.tokens_model is not None:
            app.router.add_post("/v1/completions", self.completions)
            app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/stats", self.stats)
        return app

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, port: int = 0) -> "FakeOpenAI":
        ready = threading.Event()

        def serve():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            # requests made to hang are cut at stop, not waited for
            self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.5)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=4096)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            left = asyncio.all_tasks(self._loop)  # handlers of held requests, cut
            for t in left:
                t.cancel()
            self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


class TokenModel:
    """Answers made of token ids, each its own text (` w<id>`), so that an answer continued from any
    prefix of its ids is the same answer: the thinking, `</think>` (a special token, left out of
    the text with skip_special_tokens), the answer text, and the EOS id that vLLM's token_ids hold."""

    END, END_TEXT, EOS = 7, "</think>", 2

    def __init__(self):
        self.prompts: dict[tuple, tuple[str, bool]] = {}

    def prompt_ids(self, key: str, thinking: bool) -> list[int]:
        rng = random.Random("prompt" + key)
        ids = [rng.randrange(100, 999) for _ in range(5 + rng.randrange(20))]
        self.prompts[tuple(ids)] = (key, thinking)
        return ids

    def answer(self, key: str, n: int, thinking: bool) -> list[int]:
        rng = random.Random("answer" + key)
        words = [rng.randrange(1000, 9000) for _ in range(max(2, n) - 1)]
        if thinking:
            m = max(1, len(words) // 3)
            words = words[:m] + [self.END] + words[m:]
        return words + [self.EOS]

    @staticmethod
    def cut(ids: list, max_tokens) -> tuple[list, str]:
        if max_tokens is not None and len(ids) > int(max_tokens):
            return ids[: int(max_tokens)], "length"
        return ids, "stop"

    def text(self, ids, skip: bool = True) -> str:
        return "".join(
            (self.END_TEXT if not skip else "")
            if i == self.END
            else ("" if i == self.EOS else f" w{i}")
            for i in ids
        )

    def parse_delta(
        self, previous: list, delta: list, skip: bool, thinking: bool, stops: bool
    ) -> dict:
        """vllm/reasoning/basic_parsers.py extract_reasoning_streaming (0.32): `find` of the end
        marker's text in delta_text, which skip_special_tokens emptied (vllm#53303)."""
        text = self.text(delta[:-1] if stops else delta, skip)
        if not thinking:
            return {"content": text}
        if len(delta) == 1 and delta[0] == self.END:
            return {}
        if self.END in delta:
            i = text.find(self.END_TEXT)
            content = text[i + len(self.END_TEXT) :]
            return {"reasoning": text[:i], "content": content or None}
        if self.END in previous:
            return {"content": text}
        return {"reasoning": text}

    def split(self, ids: list) -> tuple[str | None, str]:
        """The right reasoning and content of a whole answer (what a record must say)."""
        body = ids[:-1] if ids and ids[-1] == self.EOS else ids
        if self.END in body:
            i = body.index(self.END)
            return self.text(body[:i]) or None, self.text(body[i + 1 :])
        return None, self.text(body)

    def find(self, prompt: list):
        for n in range(len(prompt), 0, -1):
            got = self.prompts.get(tuple(prompt[:n]))
            if got is not None:
                return got[0], got[1], prompt[n:]
        return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--fail-rate", type=float, default=0.0)
    p.add_argument("--shape", choices=["classic", "vllm"], default="classic")
    p.add_argument("--cut-in-thinking", type=float, default=0.0)
    p.add_argument("--slots", type=int, default=None)
    p.add_argument("--token-time", type=float, default=0.0)
    p.add_argument("--hold-while", type=Path, help="requests wait while this file exists")
    a = p.parse_args()
    srv = FakeOpenAI(
        latency=a.latency,
        fail_rate=a.fail_rate,
        shape=a.shape,
        cut_in_thinking=a.cut_in_thinking,
        slots=a.slots,
        token_time=a.token_time,
    )
    srv.hold_while = a.hold_while
    srv.start(a.port)
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
