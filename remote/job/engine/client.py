"""Engines: an OpenAI-compatible server (vLLM) over aiohttp, and `simulate`, a built-in stand-in."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

from ...common.records import Reply
from . import continuation, meter
from .kept_tokens import Keeping, signature
from .stream import Assembly, ThinkingSplit, Watchdog, read_stream


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


class JobFault(PermanentError):
    """An answer that says nothing about the prompt: every other prompt would get the same (401/403
    credentials, 404 a model the server does not serve or a wrong base_url, a server started without
    what the stage needs)."""


def refused(message: str, status: int) -> PermanentError:
    """The error of a 4xx answer, typed by whose fault it is."""
    return (JobFault if status in (401, 403, 404) else PermanentError)(message, status)


class Stuck(EngineError):
    """A streamed request that stopped making progress: abandoned and sent again (like a failover
    requeue: no retry counted), counted per server."""


class EngineDown(EngineError):
    """The server refuses connections, or dropped this one mid-request (its process died): the request
    goes to another server, or waits for this one to answer again (up to the engine's down_deadline)."""


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_reply(data, fallback_model: str) -> Reply:
    """One chat-completion body -> Reply. Current vLLM (>= 0.16) sends every field, `null` where
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
    return Reply(
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
    and the telemetry use nothing else). Used as `async with make_engine(job) as engine` (kinds.py)."""

    model: str  # what records say made them
    base_urls: list[str]  # the servers requests go to (the pool's endpoints)

    async def __aenter__(self) -> "Engine":
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    async def complete(
        self, url: str, messages: list, est_tokens: int, key: str, keep: Keeping | None = None
    ) -> Reply:
        """One answer from the server at `url`; raises EngineDown, Stuck, TransientError or
        PermanentError, each of which the dispatcher handles its own way. With `keep`, the tokens
        stream into it, and a kept unfinished answer is continued rather than asked again."""
        raise NotImplementedError

    def signature(self, messages: list) -> str:
        """Which request kept tokens answer: these messages under these settings."""
        return signature(messages)

    async def end_of_thinking(self, url: str) -> int | None:
        """The token id that ends the thinking on `url` (None: unknown)."""
        return None

    async def probe(self, url: str) -> str | None:
        """None when the server answers at all, else why not (a down server is probed until then)."""
        raise NotImplementedError

    def last_data_at(self, url: str) -> float | None:
        """When a stream from `url` last delivered bytes (wall clock); None: not streamed."""
        return None

    async def metrics(self, url: str) -> str | None:
        """The server's Prometheus text, or None where it has none."""
        return None

    async def hidden_states(self, url: str, input_ids: list[int], key: str, incoming: Path) -> Path:
        """The target's hidden states of exactly these tokens, as a file the server writes (it may
        still be writing it: hsfile.written says when it is done); raises the engine errors."""
        raise NotImplementedError


class OpenAIEngine(Engine):
    """POST {base_url}/chat/completions, one request per prompt; the window lives in the runner."""

    def __init__(self, job, keys: dict[str, str] | None = None):
        engine = job.engine
        self.base_urls = engine.urls()
        # a server's own key (hosts.yaml `server:`) before the job's api_key_env one
        self.keys = {u.rstrip("/"): k for u, k in (keys or {}).items() if k}
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
        # vLLM's reasoning parser splits at the end-of-thinking marker's text: a special-token
        # marker left out of the text makes it cut the answer one character early (vllm#53303).
        # Only where the job already speaks vLLM's dialect: another server may refuse the field.
        if job.extra_body.get("return_token_ids"):
            self.fixed.setdefault("skip_special_tokens", False)
        self.thinking_end = engine.thinking_end
        self._end_ids: dict[str, int | None] = {}
        self._session = None

    async def __aenter__(self):
        import aiohttp  # installed with vLLM on the host; imported late so `simulate` needs nothing

        self._aiohttp = aiohttp
        self._watching = asyncio.ensure_future(self.watchdog.run()) if self.stream else None
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._session = aiohttp.ClientSession(
            headers=headers,
            # an idle connection is let go before the server's keep-alive ends (uvicorn's, vLLM's
            # server, closes it after 5 s): reusing one it closed fails the request on the spot
            connector=aiohttp.TCPConnector(limit=0, force_close=False, keepalive_timeout=2.0),
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
            async with self._aside("GET", url, f"{url}/models", 10) as resp:
                await resp.read()
            return None
        except asyncio.TimeoutError:
            return "no answer within 10s"
        except (self._aiohttp.ClientError, OSError) as e:
            return f"{type(e).__name__}: {e}"

    def _auth(self, url: str) -> dict:
        key = self.keys.get(url.rstrip("/"))
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _aside(self, method: str, url: str, where: str, seconds: float, **kw):
        """A short request beside the answers to the server at `url`."""
        timeout = self._aiohttp.ClientTimeout(total=seconds)
        return self._session.request(method, where, timeout=timeout, headers=self._auth(url), **kw)

    def last_data_at(self, url: str) -> float | None:
        return self.watchdog.last_data_at(url) if self.stream else None

    async def metrics(self, url: str) -> str | None:
        """The server's Prometheus text (vLLM serves /metrics beside /v1), or None."""
        root = url.removesuffix("/v1")
        try:
            async with self._aside("GET", url, f"{root}/metrics", 5) as resp:
                return await resp.text() if resp.status == 200 else None
        except (asyncio.TimeoutError, self._aiohttp.ClientError, OSError):
            return None

    def signature(self, messages: list) -> str:
        return signature(messages, self.fixed)

    async def end_of_thinking(self, url: str) -> int | None:
        """The marker's token id, from vLLM's /tokenize (asked once per server)."""
        if url in self._end_ids:
            return self._end_ids[url]
        root = url.removesuffix("/v1")
        body = {"model": self.model, "prompt": self.thinking_end, "add_special_tokens": False}
        try:
            async with self._aside("POST", url, f"{root}/tokenize", 10, json=body) as resp:
                got = await resp.json(content_type=None) if resp.status == 200 else None
                definite = resp.status < 500
        except (asyncio.TimeoutError, self._aiohttp.ClientError, OSError, ValueError):
            return None  # asked again next time
        tokens = got.get("tokens") if isinstance(got, dict) else None
        end = tokens[0] if isinstance(tokens, list) and len(tokens) == 1 else None
        if definite:
            self._end_ids[url] = end
        return end

    async def complete(
        self, url: str, messages: list, est_tokens: int, key: str, keep: Keeping | None = None
    ) -> Reply:
        if keep is not None and keep.continuing:
            return await self._continue(url, keep, key)
        if keep is not None:
            keep.asm, keep.end_id = Assembly(), self._end_ids.get(url)
        data = await self._post(url, "chat/completions", {**self.fixed, "messages": messages}, keep)
        return self._parse(data)

    async def _continue(self, url: str, keep: Keeping, key: str) -> Reply:
        """The kept answer, continued: prompt = its prompt ids + the ids made so far."""
        kept = keep.base
        body = continuation.body(self.fixed, kept, key)
        if (flow := meter.current()) is not None:
            flow.before = len(kept.ids)
        reply = None
        if body is not None:
            end = self._end_ids.get(url)
            keep.asm = Assembly(ThinkingSplit(self.thinking_end, bool(kept.thinking), end))
            reply = await self._post(url, "completions", body, keep)
            choices = reply.get("choices") if isinstance(reply, dict) else None
            if not (choices and isinstance(choices[0], dict) and "message" in choices[0]):
                # one body, not a stream: split it as the stream would have been
                reply = _split_body(reply, self.thinking_end, bool(kept.thinking))
        return continuation.merged(kept, reply, str((reply or {}).get("model") or self.model))

    def _parse(self, data) -> Reply:
        try:
            return parse_reply(data, self.model)
        except (ValueError, TypeError) as e:
            raise TransientError(f"malformed reply ({e})") from None

    async def hidden_states(self, url: str, input_ids: list[int], key: str, incoming: Path) -> Path:
        """One prefill of the row's own token ids (no template, no tokenizer: the ids are the
        record's) and one token made; vLLM's extraction connector writes the file and names it."""
        body = {"model": self.model, "prompt": list(input_ids), "max_tokens": 1, "temperature": 0}
        data = await self._post(url, "completions", body, None, watch=False)
        params = data.get("kv_transfer_params") if isinstance(data, dict) else None
        where = params.get("hidden_states_path") if isinstance(params, dict) else None
        if not isinstance(where, str) or not where:
            raise JobFault(
                "the server wrote no hidden states (no kv_transfer_params.hidden_states_path in its "
                "answer): start it with the extraction config (--speculative-config and "
                "--kv-transfer-config, see docs/hidden-states.md)"
            )
        return Path(where)

    async def _post(
        self, url: str, path: str, body: dict, keep: Keeping | None, watch: bool | None = None
    ):
        """One request; the reply body (a stream put back together). Raises the engine errors."""
        aiohttp = self._aiohttp
        progress = self.watchdog.watch(url) if (self.stream if watch is None else watch) else None
        try:
            async with self._session.post(
                f"{url}/{path}", json=body, headers=self._auth(url)
            ) as resp:
                status = resp.status
                # a server that ignores `stream` answers one JSON body: read it as such
                streamed = status == 200 and resp.content_type == "text/event-stream"
                if streamed:
                    got = keep.asm if keep is not None else Assembly()
                    if (flow := meter.current()) is not None:  # counted as it streams
                        flow.asm = got
                    data = await read_stream(resp.content, progress, got)
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
            raise refused(f"HTTP {status}: {_error_text(text)[:500]}", status)
        if streamed:
            return data
        try:
            return json.loads(text)
        except ValueError as e:
            raise TransientError(f"malformed reply ({e})") from None


def _split_body(reply, marker: str, thinking: bool) -> dict:
    """A non-streamed completions body in the shape a chat reply has, its text split."""
    try:
        choice = reply["choices"][0]
        got = Assembly(ThinkingSplit(marker, thinking))
        got.add(
            {
                "choices": [
                    {
                        "text": choice.get("text") or "",
                        "token_ids": choice.get("token_ids"),
                        "finish_reason": choice.get("finish_reason"),
                    }
                ],
                "usage": reply.get("usage"),
                "model": reply.get("model"),
            }
        )
        return got.reply()
    except (KeyError, IndexError, TypeError, ValueError) as e:
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


def next_try(e: Exception, n: int, eng) -> float | None:
    """The one rule every stage asks an item again by, after its `n`-th try of e's kind went
    wrong (`eng`: the job's EngineSpec). None: it fails, left for the next restart. 0.0: its
    server went away under it (down, or stuck on it): asked again at once, once that server
    answers again, until `max_requeues` (an item that takes its server down, or hangs it). Else a
    slow engine (or a bad answer): asked again after a backoff, longer each time, until
    `max_retries`."""
    if isinstance(e, (EngineDown, Stuck)):
        return None if n > eng.max_requeues else 0.0
    return None if n > eng.max_retries else backoff(min(n - 1, 16), eng.retry_base)


def backoff(attempt: int, base: float, cap: float = 60.0) -> float:
    """Exponential backoff with full jitter: `base`, doubling per attempt, up to a minute (or up to
    `base` itself, where a job asks for a first wait longer than that)."""
    return random.uniform(0.5, 1.0) * min(max(cap, base), base * (2**attempt))
