"""The draft stage: how well a draft model does on the job's data, measured by vLLM's own counters.
Each dataset's held-out prompts (those after its cap: no answer of theirs is training data) are
answered by the job's server started with the draft (`server.draft`), one dataset at a time, so the
deltas of the server's speculative-decoding counters over a dataset are that dataset's. The process
around it is the runner's (runner.py), as for the other stages.

Resumable: an answer counts once it is in <tag>/<DS>.jsonl (a kill's cut-off requests are asked
again), and the counts kept in <tag>/<DS>.counts.json carry the last sample, so a new runner's first
sample adds what the server counted meanwhile. Counters start again from zero when the server does:
a sample lower than the last is a new server life, whose counts are added whole."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...common import metrics
from ...common.caps import DRAFT, Caps
from ...common.codec import read_json, write_json
from ...common.records import Record
from ...common.state import ServerKeys, Supervise
from ...common.status import DatasetState, DatasetStatus, DraftCounts, EngineStatus
from ..engine.client import EngineDown, EngineError, JobFault, PermanentError, backoff
from ..engine.kinds import make_engine
from ..store.datasets import BadInput
from ..store.outputs import AppendFile, encode_record, load_existing, repair_tail
from ..store.prompts import Prompt, PromptFile
from ..store.rates import RateWindow

SAMPLE_S = 1.0  # between samples of the servers' counters while a dataset runs


def draft_tag(draft: dict) -> str:
    """The folder of a draft's results: its name, and a fingerprint of what it is (its model, method
    and tokens a step; for a folder on this host, its files' names, sizes and times too), so two
    drafts, or a draft retrained in place, never share counts."""
    model = str(draft["model"])
    facts = [model, draft["method"], draft["num_speculative_tokens"]]
    folder = Path(model).expanduser()
    if folder.is_dir():
        for f in sorted(folder.iterdir()):
            st = f.stat()
            facts.append([f.name, st.st_size, st.st_mtime_ns])
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", model.rstrip("/").rsplit("/", 1)[-1]) or "draft"
    return f"{name}-{hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:10]}"


@dataclass
class Measured:
    """One dataset of the stage: its held-out prompts, its answers, what the servers counted."""

    name: str
    todo: list[Prompt]
    target: int
    done: set[str]
    out: AppendFile | None
    counts_path: Path
    counts: DraftCounts = field(default_factory=DraftCounts)
    last: dict[str, DraftCounts] = field(default_factory=dict)  # per server: the last sample
    tokens: int = 0  # output tokens of its answers
    seconds: float = 0.0  # the time it ran, every runner's
    in_flight: int = 0
    failed: int = 0
    new: int = 0
    made: RateWindow = field(default_factory=RateWindow)

    def keep(self) -> None:
        """The counts, what the last samples were and the time it ran: read back by a new runner."""
        write_json(
            self.counts_path,
            {
                "counts": self.counts.to_dict(),
                "last": {u: c.to_dict() for u, c in self.last.items()},
                "tokens": self.tokens,
                "seconds": self.seconds,
            },
        )

    def sampled(self, url: str, now: DraftCounts) -> None:
        """A sample of a server's counters: what it counted since the last one is this dataset's
        (the first, before any of its requests, is where it starts from)."""
        if url in self.last:
            self.counts = self.counts.plus(now.since(self.last[url]))
        self.last[url] = now

    def state(self) -> str:
        if len(self.done) >= self.target:
            return DatasetState.COMPLETE
        if not self.todo and not self.in_flight and self.failed:
            return DatasetState.INCOMPLETE
        return DatasetState.RUNNING if self.in_flight or self.new else DatasetState.PENDING

    def status(self, now: float, started: float) -> DatasetStatus:
        return DatasetStatus(
            state=self.state(),
            done=len(self.done),
            target=self.target,
            records=len(self.done),
            prompts=self.target,
            completion_tokens=self.tokens,
            mean_tokens=self.tokens / len(self.done) if self.done else 0.0,
            errors=self.failed,
            failed_this_run=self.failed,
            in_flight=self.in_flight,
            new_records=self.new,
            tokens_per_s=self.made.per_s(now, started),
            mean_tokens_per_s=round(self.tokens / self.seconds, 1) if self.seconds >= 1 else None,
            draft=self.counts,
        )


class DraftStage:
    def __init__(self, runner, caps: Caps, force: bool):
        self.runner, self.caps = runner, caps
        self.paths, self.job, self.log, self.stop = (
            runner.paths,
            runner.job,
            runner.log,
            runner.stop,
        )
        self.sets: dict[str, Measured] = {}
        self.fatal: str | None = None
        self.engine_error: str | None = None
        self.urls: list[str] = []
        self.current: Measured | None = None
        self.retries = 0
        self.tag = ""
        self.none_left: list[str] = []  # datasets whose cap takes every prompt

    # ------------------------------------------------------------------ before it runs

    def prepare(self) -> None:
        # the draft of the server the host started for the stage (hosts.yaml `server.draft`)
        wanted = Supervise.read(self.paths.supervise)
        draft = wanted.server.spec.draft if wanted and wanted.server.wanted else {}
        if not draft:
            raise BadInput(
                "the draft stage measures the draft of the job's own server (hosts.yaml server:, "
                "started by deploytool): set server.draft.model (a folder on the host or a model "
                "id), then `invoke restart --stage draft` starts the server with it"
            )
        self.tag = draft_tag(draft)
        where = self.paths.drafts / self.tag
        where.mkdir(parents=True, exist_ok=True)
        write_json(where / "draft.json", dict(draft, tag=self.tag))
        k = int(draft["eval_samples"])
        for spec in self.job.datasets:
            name = spec.name
            if not self.caps.selected(name):
                continue
            cap = self.caps.target(name)
            pf = PromptFile(
                self.paths.root / spec.prompts, name, self.paths.prompt_index, spec.turns
            )
            start = len(pf) if cap is None else min(cap, len(pf))
            held = range(start, min(len(pf), start + k))
            if not held:
                self.none_left.append(name)
                self.log(
                    f"{name}: no held-out prompts (its cap takes all {len(pf):,}): not measured; "
                    "a lower cap leaves some"
                )
                pf.close()
                continue
            path = where / f"{name}.jsonl"
            repair_tail(path, self.log)
            done = load_existing(path, self.log).ids
            ids = set(pf.ids[i] for i in held)
            todo = [pf[i] for i in held if pf.ids[i] not in done]
            pf.close()
            kept = read_json(where / f"{name}.counts.json") or {}
            m = Measured(
                name,
                [p for p in todo if p.messages is not None],
                len(held),
                done & ids,
                AppendFile(path),
                where / f"{name}.counts.json",
                DraftCounts.from_dict(kept.get("counts") or {}),
                {u: DraftCounts.from_dict(c) for u, c in (kept.get("last") or {}).items()},
                int(kept.get("tokens") or 0),
                float(kept.get("seconds") or 0.0),
            )
            m.failed = len(todo) - len(m.todo)  # unreadable prompt lines
            self.sets[name] = m

    # ------------------------------------------------------------------ while it runs

    async def _sample(self, engine, m: Measured) -> None:
        for url in self.urls:
            text = await engine.metrics(url)
            counts = metrics.spec_decode(text) if text else None
            if counts is None and text is not None and self.fatal is None:
                self.fatal = (
                    f"the server at {url} counts no speculative decoding: it runs without a draft "
                    "(start it with the draft: `invoke restart --stage draft` restarts it so)"
                )
            if counts is not None:
                m.sampled(url, counts)
        m.keep()

    async def _sampler(self, engine, m: Measured) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            await self._sample(engine, m)

    async def _worker(self, engine, url: str, m: Measured) -> None:
        while m.todo and not self.stop.asked and self.fatal is None:
            p = m.todo.pop(0)
            m.in_flight += 1
            try:
                await self._one(engine, url, m, p)
            finally:
                m.in_flight -= 1

    async def _one(self, engine, url: str, m: Measured, p: Prompt) -> None:
        eng, tries = self.job.engine, 0
        while True:
            try:
                reply = await engine.complete(url, p.messages, 0, f"{p.id}-{os.getpid()}-{tries}")
                rec = Record.one(m.name, p.id, p.index, p.messages, reply)
                m.out.append(encode_record(rec.to_json()))
                m.done.add(p.id)
                m.new += 1
                m.tokens += reply.completion_tokens
                m.made.add(time.time(), reply.completion_tokens)
                self.engine_error = None
                return
            except JobFault as e:
                self.engine_error = self.fatal = str(e)
                return
            except PermanentError as e:
                self.engine_error = str(e)
                m.failed += 1
                self.log(f"{m.name}: {p.id}: {e}: left for the next restart")
                return
            except EngineError as e:
                self.engine_error = str(e)
                self.retries += 1
                if not isinstance(e, EngineDown) and tries >= eng.max_retries:
                    m.failed += 1
                    return
            tries += 1
            await asyncio.sleep(backoff(min(tries, 6), eng.retry_base))

    async def _measure(self, engine) -> None:
        """Dataset after dataset: its requests alone in the servers while it is counted."""
        for m in self.sets.values():
            if not m.todo or self.stop.asked or self.fatal:
                continue
            self.current, began = m, time.time()
            await self._sample(engine, m)  # what a runner before this one left uncounted
            sampler = asyncio.ensure_future(self._sampler(engine, m))
            try:
                n = self.job.engine.concurrency
                await asyncio.gather(
                    *(self._worker(engine, url, m) for url in self.urls for _ in range(n))
                )
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
                m.seconds += time.time() - began
                await self._sample(engine, m)
                m.out.sync()
            self.log(f"{m.name}: {self.said(m)}")
        self.current = None

    def said(self, m: Measured) -> str:
        c = m.counts
        if c.mean_acceptance_length is None:
            return f"{len(m.done)}/{m.target} answered; no draft counted"
        rates = ", ".join(f"{r:.2f}" for r in c.acceptance_rates)
        return (
            f"{len(m.done)}/{m.target} answered; mean acceptance length "
            f"{c.mean_acceptance_length:.2f} ({c.accepted:,.0f} of {c.draft_tokens:,.0f} draft "
            f"tokens accepted over {c.drafts:,.0f} drafts; by position {rates})"
        )

    def recap(self, caps: Caps) -> None:
        raise ValueError("the draft stage's held-out prompts follow the caps: restart it (--hard)")

    def caps_line(self) -> str:
        return self.caps.line()

    def start_lines(self) -> list[str]:
        lines = [f"caps: {self.caps.line()}; draft {self.tag}"]
        lines += [
            f"{n}: {len(m.done)}/{m.target} held-out prompts answered" for n, m in self.sets.items()
        ]
        return lines

    def in_flight(self) -> int:
        return sum(m.in_flight for m in self.sets.values())

    def tick(self) -> None:
        pass

    def stopping(self) -> None:
        for m in self.sets.values():
            m.keep()

    @contextlib.asynccontextmanager
    async def session(self):
        try:
            keys = ServerKeys.read(self.paths.server_keys)
            async with make_engine(self.job, keys.keys if keys else None) as engine:
                self.urls = list(engine.base_urls)
                yield self._measure(engine)
        finally:
            for m in self.sets.values():
                if m.out is not None:
                    m.out.sync()
                    m.out.close()

    async def abandon(self) -> int:
        return self.in_flight()  # asked again on resume: an answer counts once written

    def status(self, now: float) -> dict:
        datasets = {n: m.status(now, self.runner.started_at) for n, m in self.sets.items()}
        rate = sum(d.tokens_per_s for d in datasets.values())
        return dict(
            engine=EngineStatus(
                kind=self.job.engine.kind,
                model=self.runner.model_name,
                base_urls=list(self.urls),
                reachable=self.engine_error is None,
                last_error=self.engine_error,
            ),
            concurrency=self.job.engine.concurrency * max(1, len(self.urls)),
            in_flight=self.in_flight(),
            tokens_per_s=rate,
            completion_tokens=sum(m.tokens for m in self.sets.values()),
            errors=sum(m.failed for m in self.sets.values()),
            retries=self.retries,
            datasets=datasets,
            stage=DRAFT,
        )

    def summary(self) -> str:
        return "; ".join(f"{n} {len(m.done)}/{m.target}" for n, m in self.sets.items())

    def progress_line(self) -> str:
        return "draft measured " + self.summary()

    def finished(self) -> str:
        """What the table beside it cannot say: the datasets left unmeasured, and why."""
        said = [f"{m.failed} of {n}'s prompts failed" for n, m in self.sets.items() if m.failed]
        if self.none_left:
            said.append(
                f"no held-out prompts in {', '.join(self.none_left)} (the cap takes every prompt)"
            )
        return "; ".join(said)

    def ended(self) -> None:
        pass
