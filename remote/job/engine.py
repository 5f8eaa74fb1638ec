"""Engines: an OpenAI-compatible server (vLLM) over aiohttp, and `simulate`, a built-in stand-in."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from dataclasses import dataclass

from .stream import Watchdog, read_stream


class EngineError(Exception):
    pass


class TransientError(EngineError):
    """Timeouts, 429, 5xx, malformed replies: retry with backoff."""

    def __init__(self, message: str, timeout: bool = False):
        super().__init__(message)
        self.timeout = timeout  # the server may be gone: the pool asks it


class PermanentError(EngineError):
    """4xx other than 408/429: retrying cannot help."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def job_fault(self) -> bool:
        """401/403 (credentials) and 404 (a model the server does not serve, a wrong base_url) say
        nothing about the prompt: every other prompt would get the same answer."""
        return self.status in (401, 403, 404)


class Stuck(EngineError):
    """A streamed request that stopped making progress: abandoned and sent again (like a failover
    requeue: no retry counted), counted per server."""


class EngineDown(EngineError):
    """The server refuses connections, or dropped this one mid-request (its process died): the request
    goes to another server, or waits for this one to answer again (up to the engine's down_deadline)."""


@dataclass
class Completion:
    content: str
    reasoning_content: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    model: str
    prompt_token_ids: list | None = (
        None  # vLLM `return_token_ids`: the exact tokens a draft model trains on
    )
    token_ids: list | None = None


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_reply(data, fallback_model: str) -> Completion:
    """One chat-completion body -> Completion. Current vLLM (>= 0.16) sends every field, `null` where
    unset, and the thinking in `reasoning`; older vLLM, SGLang and DeepSeek-style APIs send
    `reasoning_content`. `content: null` is an answer (cut by max_tokens inside the thinking, or
    thinking only): it is recorded, never asked again. Only a body without a usable choice is
    malformed (ValueError)."""
    if not isinstance(data, dict):
        raise ValueError("the body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("no choices")
    choice = choices[0]
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise ValueError("choice without a message")
    content = msg.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"content is {type(content).__name__}, not text")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    token_ids = choice.get("token_ids")
    prompt_ids = data.get("prompt_token_ids")
    return Completion(
        content=content or "",
        reasoning_content=_text(msg.get("reasoning")) or _text(msg.get("reasoning_content")),
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        model=str(data.get("model") or fallback_model),
        prompt_token_ids=prompt_ids if isinstance(prompt_ids, list) else None,
        token_ids=token_ids if isinstance(token_ids, list) else None,
    )


class Engine:
    """What the runner asks of an engine (the declared interface: the dispatcher, the pool's probes
    and the telemetry use nothing else). Used as `async with make_engine(job) as engine`."""

    model: str  # what records say made them
    base_urls: list[str]  # the servers requests go to (the pool's endpoints)

    async def __aenter__(self) -> "Engine":
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    async def complete(self, url: str, messages: list, est_tokens: int, key: str) -> Completion:
        """One answer from the server at `url`; raises EngineDown, Stuck, TransientError or
        PermanentError, each of which the dispatcher handles its own way."""
        raise NotImplementedError

    async def probe(self, url: str) -> str | None:
        """None when the server answers at all, else why not (a down server is probed until then)."""
        raise NotImplementedError

    def last_data_at(self, url: str) -> float | None:
        """When a stream from `url` last delivered bytes (wall clock); None: not streamed."""
        return None

    async def metrics(self, url: str) -> str | None:
        """The server's Prometheus text, or None where it has none."""
        return None


class OpenAIEngine(Engine):
    """POST {base_url}/chat/completions, one request per prompt; the window lives in the runner."""

    def __init__(self, job):
        engine = job.engine
        self.base_urls = engine.urls()
        self.model = engine.model
        self.timeout = engine.request_timeout
        self.concurrency = engine.concurrency
        self.stream = engine.stream
        self.watchdog = Watchdog(engine.first_token_timeout, engine.progress_timeout)
        key_env = engine.api_key_env
        self.api_key = (
            os.environ.get(key_env, "") if key_env else os.environ.get("OPENAI_API_KEY", "")
        )
        # everything but the messages is the same for every request: build it once
        self.fixed = {"model": self.model, **job.sampling}
        if job.chat_template_kwargs:
            self.fixed["chat_template_kwargs"] = dict(job.chat_template_kwargs)
        # vLLM's extras (repetition_detection, return_token_ids, ...) as-is
        self.fixed.update(job.extra_body)
        if self.stream:  # tokens as they come: a request that stops making progress is seen
            self.fixed.update(stream=True, stream_options={"include_usage": True})
        self._session = None

    async def __aenter__(self):
        import aiohttp  # installed with vLLM on the host; imported late so `simulate` needs nothing

        self._aiohttp = aiohttp
        self._watching = asyncio.ensure_future(self.watchdog.run()) if self.stream else None
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._session = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
        )
        return self

    async def __aexit__(self, *exc):
        if self._watching is not None:
            self._watching.cancel()
        await self._session.close()

    async def probe(self, url: str) -> str | None:
        """None when the server answers HTTP at all (any status), else why not."""
        try:
            async with self._session.get(
                f"{url}/models", timeout=self._aiohttp.ClientTimeout(total=10)
            ) as resp:
                await resp.read()
            return None
        except asyncio.TimeoutError:
            return "no answer within 10s"
        except (self._aiohttp.ClientError, OSError) as e:
            return f"{type(e).__name__}: {e}"

    def last_data_at(self, url: str) -> float | None:
        return self.watchdog.last_data_at(url) if self.stream else None

    async def metrics(self, url: str) -> str | None:
        """The server's Prometheus text (vLLM serves /metrics beside /v1), or None."""
        root = url[: -len("/v1")] if url.endswith("/v1") else url
        try:
            async with self._session.get(
                f"{root}/metrics", timeout=self._aiohttp.ClientTimeout(total=5)
            ) as resp:
                return await resp.text() if resp.status == 200 else None
        except (asyncio.TimeoutError, self._aiohttp.ClientError, OSError):
            return None

    async def complete(self, url: str, messages: list, est_tokens: int, key: str) -> Completion:
        aiohttp = self._aiohttp
        body = {**self.fixed, "messages": messages}
        progress = self.watchdog.watch(url) if self.stream else None
        try:
            async with self._session.post(f"{url}/chat/completions", json=body) as resp:
                status = resp.status
                # a server that ignores `stream` answers one JSON body: read it as such
                streamed = status == 200 and resp.content_type == "text/event-stream"
                if streamed:
                    data = await read_stream(resp.content, progress)
                else:
                    text = await resp.text()
        except asyncio.CancelledError:
            if progress is None or progress.why is None:
                raise  # a stop, not the watchdog
            task = asyncio.current_task()
            if hasattr(task, "uncancel"):  # Python 3.11+: this cancellation is handled here
                task.uncancel()
            raise Stuck(progress.why) from None
        except aiohttp.ClientConnectorError as e:
            raise EngineDown(f"cannot connect to {url}: {e.os_error or e}") from None
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            aiohttp.ClientPayloadError,
            ConnectionResetError,
        ) as e:
            raise EngineDown(f"connection dropped mid-request ({type(e).__name__}: {e})") from None
        except asyncio.TimeoutError:
            raise TransientError(
                f"request timed out after {self.timeout:g}s", timeout=True
            ) from None
        except (aiohttp.ClientError, ConnectionError) as e:
            raise TransientError(f"{type(e).__name__}: {e}") from None
        except ValueError as e:  # a stream that does not parse
            raise TransientError(f"malformed stream ({e})") from None
        finally:
            if progress is not None:
                self.watchdog.done(progress)
        if status == 429 or status == 408 or status >= 500:
            raise TransientError(f"HTTP {status}: {text[:200]}")
        if status >= 400:
            raise PermanentError(f"HTTP {status}: {_error_text(text)[:500]}", status)
        try:
            return parse_reply(data if streamed else json.loads(text), self.model)
        except (ValueError, TypeError) as e:
            raise TransientError(f"malformed reply ({e})") from None


def _error_text(body: str) -> str:
    """The server's own message from an OpenAI-style error body, else the body."""
    try:
        err = json.loads(body)
        err = err.get("error", err) if isinstance(err, dict) else err
        msg = err.get("message") if isinstance(err, dict) else None
        return msg if isinstance(msg, str) and msg else body
    except ValueError:
        return body


_WORDS = (
    "the model answers with a long and careful response that walks through each step of the "
    "reasoning before it gives the final result so that a draft model can learn"
).split()


class SimulateEngine(Engine):
    """Answers like a continuous-batching server: a shared token rate split over the requests in
    flight, long-tailed response lengths around each dataset's est_tokens. A demo, never a fallback."""

    model = "simulated"
    base_urls = ["simulate"]

    def __init__(self, job):
        engine, sampling = job.engine, job.sampling
        self.tokens_per_s = engine.tokens_per_s
        self.concurrency = engine.concurrency
        self.max_tokens = int(sampling.get("max_tokens", 8192))
        self.thinking = bool(job.chat_template_kwargs.get("thinking"))

    def length(self, est_tokens: int, key: str) -> int:
        rng = random.Random(key)
        sigma = 0.6
        mu = math.log(max(est_tokens, 1)) - sigma * sigma / 2  # lognormal with mean est_tokens
        return max(8, int(rng.lognormvariate(mu, sigma)))

    async def probe(self, url: str) -> str | None:
        return None  # no server to ask

    async def complete(self, url: str, messages: list, est_tokens: int, key: str) -> Completion:
        n = self.length(est_tokens, key)
        finish = "stop"
        if n >= self.max_tokens:
            n, finish = self.max_tokens, "length"
        per_seq = self.tokens_per_s / max(1, self.concurrency)
        await asyncio.sleep(n / per_seq)
        words = [_WORDS[i % len(_WORDS)] for i in range(n)]
        reasoning = " ".join(words[: max(1, n // 4)]) if self.thinking else None
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
        return Completion(" ".join(words), reasoning, finish, prompt_tokens, n, self.model)


def make_engine(job) -> Engine:
    kind = job.engine.kind
    if kind == "simulate":
        return SimulateEngine(job)
    if kind == "openai":
        return OpenAIEngine(job)
    raise ValueError(f"unknown engine kind {kind!r}")


def backoff(attempt: int, base: float, cap: float = 60.0) -> float:
    """Exponential backoff with full jitter."""
    return random.uniform(0.5, 1.0) * min(cap, base * (2**attempt))


def now() -> float:
    return time.time()
