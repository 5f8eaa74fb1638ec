"""A real HTTP server speaking the OpenAI chat-completions API, with injectable latency and failures.

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

from aiohttp import web


class FakeOpenAI:
    def __init__(self, *, latency: float = 0.0, fail_rate: float = 0.0, rate_limit_rate: float = 0.0,
                 hang_rate: float = 0.0, malformed_rate: float = 0.0, bad_request_ids: set[str] | None = None,
                 tokens: int | None = None, seed: int = 0, model: str = "test-model", slots: int | None = None,
                 token_time: float = 0.0):
        self.latency = latency
        self.fail_rate, self.rate_limit_rate = fail_rate, rate_limit_rate
        self.hang_rate, self.malformed_rate = hang_rate, malformed_rate
        self.bad_request_ids = bad_request_ids or set()
        self.tokens = tokens
        self.rng = random.Random(seed)
        self.model = model
        self.slots = asyncio.Semaphore(slots) if slots else None  # continuous batching: fixed batch slots
        self.token_time = token_time  # seconds per output token inside a slot
        self.requests: collections.Counter = collections.Counter()  # prompt text -> times answered OK
        self.attempts: collections.Counter = collections.Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.busy_slot_time = 0.0
        self.t_first: float | None = None  # first request in, last answer out: measured throughput window
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
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def chat(self, request):
        body = await request.json()
        if self.t_first is None:
            self.t_first = time.monotonic()
        key = self.prompt_key(body)
        self.attempts[key] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
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
                await asyncio.sleep(3600)
            roll -= self.hang_rate
            n = self.tokens_for(key)
            if self.slots is not None:
                async with self.slots:
                    t0 = time.monotonic()
                    await asyncio.sleep(self.latency + n * self.token_time)
                    self.busy_slot_time += time.monotonic() - t0
            elif self.latency:
                await asyncio.sleep(self.latency)
            if roll < self.malformed_rate:
                return web.Response(text='{"choices": [', content_type="application/json")
            self.requests[key] += 1
            self.t_last = time.monotonic()
            return web.json_response({
                "id": f"cmpl-{self.rng.getrandbits(32):x}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", self.model),
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": f"answer with {n} tokens",
                    "reasoning_content": "thinking" if (body.get("chat_template_kwargs") or {}).get("thinking") else None}}],
                "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": n, "total_tokens": len(text) // 4 + n},
            })
        finally:
            self.in_flight -= 1

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, port: int = 0) -> "FakeOpenAI":
        ready = threading.Event()

        def serve():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._runner = web.AppRunner(self.app(), access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=4096)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--fail-rate", type=float, default=0.0)
    a = p.parse_args()
    srv = FakeOpenAI(latency=a.latency, fail_rate=a.fail_rate).start(a.port)
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
