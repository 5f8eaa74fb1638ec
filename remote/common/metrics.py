"""vLLM's Prometheus `/metrics`, read into the few numbers a batch job needs. Under data parallel
there is one series per engine: counts are summed over them, and the KV-cache usage, a fraction per
engine, is averaged (two engines at 50% are a cache half full, not a full one).
"""

from __future__ import annotations

import re

from .status import DraftCounts, ServerMetrics

_LINE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the second: before v0.10
GENERATION = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"

# the speculative-decoding counters, and the DraftCounts field each adds to
SPEC_COUNTS = {
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted",
}
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_POSITION = re.compile(r'position="(\d+)"')


def spec_decode(text: str) -> DraftCounts | None:
    """The speculative-decoding counters, summed over engines; None: the server has none (it was
    started without a draft)."""
    got, seen, per = DraftCounts(), False, {}
    for name, labels, value in _series(text, "vllm:spec_decode"):
        seen = True
        if name in SPEC_COUNTS:
            setattr(got, SPEC_COUNTS[name], getattr(got, SPEC_COUNTS[name]) + value)
        elif name == SPEC_PER_POSITION and (p := _POSITION.search(labels)):
            per[int(p.group(1))] = per.get(int(p.group(1)), 0.0) + value
    got.per_position = [per.get(i, 0.0) for i in range(max(per) + 1)] if per else []
    return got if seen else None


def _series(text: str, prefix: str = ""):
    """Prometheus text format -> (name, labels, value) of each sample whose name has `prefix`."""
    for line in text.splitlines():
        if not line.startswith(prefix) or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        yield m.group(1), m.group(2) or "", value


def parse(text: str) -> dict[str, list[float]]:
    """Prometheus text format -> {series name: [value per label set]}."""
    out: dict[str, list[float]] = {}
    for name, _, value in _series(text):
        out.setdefault(name, []).append(value)
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


def between(
    snap: dict, now: float, last: tuple | None, before: ServerMetrics | None
) -> ServerMetrics:
    """One server's ServerMetrics from a /metrics snapshot (at `now`, monotonic seconds) and the
    one before it (`last`: its time and snapshot)."""
    prev_t, prev = last or (None, {})
    rate = new_preempt = None
    if prev_t is not None and None not in (
        snap["generation_tokens"],
        prev.get("generation_tokens"),
    ):
        delta = max(0.0, snap["generation_tokens"] - prev["generation_tokens"])
        rate = round(delta / (now - prev_t), 1)
    if None not in (snap["preemptions"], prev.get("preemptions")):
        new_preempt = max(0, int(snap["preemptions"] - prev["preemptions"]))
    running, waiting = snap["running"], snap["waiting"]
    if not running and not waiting and rate:
        # tokens made while the gauges say nothing runs: stale gauges (vLLM's CPU build under load,
        # measured), unknown rather than an empty batch that misleads
        running = waiting = None
    room = waiting == 0 and snap["kv_cache"] is not None and snap["kv_cache"] < 0.8
    return ServerMetrics(
        running=running,
        waiting=waiting,
        kv_cache=snap["kv_cache"],
        generation_tokens_per_s=rate,
        preemptions=snap["preemptions"],
        new_preemptions=new_preempt,
        # samples in a row with nothing waiting and KV cache to spare: one is chance, three a pattern
        room_samples=(before.room_samples + 1 if before else 1) if room else 0,
    )
