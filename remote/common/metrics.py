"""vLLM's Prometheus `/metrics`, read into the few numbers a batch job needs.

Each series carries `model_name` and `engine` labels; under data parallel there is one series per
engine. Counts (running, waiting, tokens, preemptions) are summed over them; the KV-cache usage is a
fraction per engine, so it is averaged (two engines at 50% are a cache half full, not a full one).
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
# the second: vLLM before v0.10
KV_CACHE = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
)
GENERATION = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"


def parse(text: str) -> dict[str, list[float]]:
    """Prometheus text format -> {series name: [value per label set]}."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.setdefault(m.group(1), []).append(value)
    return out


def total(series: dict[str, list[float]], name: str) -> float | None:
    values = series.get(name)
    return sum(values) if values else None


def mean(series: dict[str, list[float]], *names: str) -> float | None:
    for name in names:
        values = series.get(name)
        if values:
            return sum(values) / len(values)
    return None


def snapshot(text: str) -> dict:
    """running, waiting, kv_cache (0-1), generation_tokens and prompt_tokens (counters), preemptions;
    None where missing."""
    s = parse(text)
    running, waiting = total(s, RUNNING), total(s, WAITING)
    if running == 0 and waiting:
        # impossible for a working scheduler: a stale gauge (seen on vLLM's CPU build under load,
        # while thousands of tokens/s flowed). Unknown, rather than an empty batch that misleads
        running = None
    return {
        "running": running,
        "waiting": waiting,
        "kv_cache": mean(s, *KV_CACHE),
        "generation_tokens": total(s, GENERATION),
        "prompt_tokens": total(s, PROMPT),
        "preemptions": total(s, PREEMPTIONS),
    }
