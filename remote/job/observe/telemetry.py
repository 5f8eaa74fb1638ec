"""The servers' own view (/metrics) and the GPUs' (nvidia-smi), sampled off the request path: a slow
answer delays the next sample, never a request."""

from __future__ import annotations

import asyncio
import time

from ...common import machine, metrics
from ...common.status import GpuStatus
from ..engine.client import Engine
from ..engine.pool import Endpoint


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
                e.metrics = metrics.between(snap, now, self._last.get(e.url), e.metrics)
                self._last[e.url] = (now, snap)
            found = await asyncio.to_thread(machine.gpus)
            self.gpus = None if found is None else [GpuStatus.from_dict(g) for g in found]
            await asyncio.sleep(self.interval)
