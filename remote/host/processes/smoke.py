"""The smoke test after a start: one short request, and whether its answer looks broken."""

from __future__ import annotations

import json
import re

from ...common.answers import SmokeAnswer
from ...common.jobspec import Paths
from . import server_process


def degenerate(text: str) -> str | None:
    """Why an answer looks broken (empty, one token over and over), or None."""
    if not text.strip():
        return "empty output"
    words = text.split()
    if len(words) >= 8 and len(set(words)) <= 2:
        return f"one token repeated: {' '.join(words[:6])!r}…"
    compact = re.sub(r"\s+", "", text)
    if len(compact) >= 20 and max(compact.count(c) for c in set(compact)) / len(compact) > 0.8:
        return f"one character repeated: {compact[:20]!r}…"
    return None


def smoke(paths: Paths, model: str) -> SmokeAnswer:
    """One short request, naming a model the server says it serves: `server.model` is the weights
    path, which --served-model-name replaces as the name requests must use."""
    import urllib.error
    import urllib.request

    rec = server_process.managed(paths)
    if not rec:
        raise server_process.ServerError("the server is not running")
    key = server_process.server_key(paths)
    served = server_process.served_models(rec.port, key)[1]
    if served and model not in served:
        model = served[0]
    body = json.dumps(
        {
            "model": model,
            "max_tokens": 64,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{rec.port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", **server_process.auth(key)},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            data = json.loads(r.read())
        msg = data["choices"][0]["message"]
        # a thinking model (Kimi-K2.5, a reasoning parser) may spend all 64 tokens thinking: then
        # `content` is null and the text to judge is the thinking
        text = msg.get("content") or msg.get("reasoning") or msg.get("reasoning_content") or ""
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as e:
        raise server_process.ServerError(f"smoke test request failed: {e}") from None
    why = degenerate(text)
    if why:
        raise server_process.ServerError(
            f"smoke test answer is degenerate ({why}): a known failure of some kernels on SM120 "
            "GPUs",
            fix="check the vLLM version and attention backend",
            log=[f"its answer: {text[:200]!r}"],
        )
    return SmokeAnswer(answer=text[:200], model=model)
