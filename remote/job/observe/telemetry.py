"""The servers' own view (/metrics) and the GPUs' (nvidia-smi), sampled off the request path: a slow
answer delays the next sample, never a request."""

from __future__ import annotations

import asyncio
import time

from ...common import machine, metrics
from ...common.status import GpuStatus, ServerMetrics
from ..engine.client import Engine
from ..engine.pool import Endpoint


def endpoint_metrics(
    snap: dict, now: float, last: tuple | None, before: ServerMetrics | None
) -> ServerMetrics:
    """What status shows for one server from one /metrics snapshot and the one before it."""
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
    room = snap["waiting"] == 0 and snap["kv_cache"] is not None and snap["kv_cache"] < 0.8
    return ServerMetrics(
        running=snap["running"],
        waiting=snap["waiting"],
        kv_cache=snap["kv_cache"],
        generation_tokens_per_s=rate,
        preemptions=snap["preemptions"],
        new_preemptions=new_preempt,
        # samples in a row with nothing waiting and KV cache to spare: one is chance, three a pattern
        room_samples=(before.room_samples + 1 if before else 1) if room else 0,
    )


class Telemetry:
    def __init__(self, engine: Engine, endpoints: list[Endpoint], interval: float):
        self.engine, self.endpoints, self.interval = engine, endpoints, interval
        self.gpus: list[GpuStatus] | None = None
        self._last: dict[str, tuple[float, dict]] = {}

    async def run(self) -> None:
        while True:
            for e in self.endpoints:
                text = await self.engine.metrics(e.url)
                if text is None:
                    e.metrics = None
                    continue
                snap, now = metrics.snapshot(text), time.monotonic()
                e.metrics = endpoint_metrics(snap, now, self._last.get(e.url), e.metrics)
                self._last[e.url] = (now, snap)
            found = await asyncio.to_thread(machine.gpus)
            self.gpus = None if found is None else [GpuStatus.from_dict(g) for g in found]
            await asyncio.sleep(self.interval)
