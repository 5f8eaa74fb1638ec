"""The draft stage: how well a draft model does on the job's data, measured by vLLM's own counters.
Each dataset's held-out prompts (those after its cap: no answer of theirs is training data) are
answered by the job's server started with the draft (`server.draft`), one dataset at a time, so the
deltas of the server's speculative-decoding counters over a dataset are that dataset's.

Resumable: an answer counts once it is in <tag>/<DS>.jsonl (a kill's cut-off requests are asked
again); <tag>/<DS>.counts.json keeps the dataset's counts and each server's sample they reach (and
its speed: status.DraftKept), and <tag>/cursor.json names the dataset the servers count for now, so
a new runner adds to that dataset what the servers counted meanwhile (even when its answers were
all in), and one starting another dataset starts from a fresh sample. Counters start again from
zero when a server does: a sample lower than the last is a new server life, whose counts are added
whole."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...common import metrics
from ...common.caps import Caps
from ...common.codec import read_json, write_json
from ...common.jobspec import DraftSpec, draft_folder
from ...common.records import Record
from ...common.stages import stage_of
from ...common.state import Supervise
from ...common.status import DatasetState, DatasetStatus, DraftKept
from ..engine.pool import Endpoint
from ..store.counts import DatasetCounts
from ..store.datasets import BadInput
from ..store.outputs import AppendFile, DiskFull, encode_record, load_existing, repair_tail
from ..store.prompts import Prompt, PromptFile
from ..store.rates import ActiveTime
from . import stage
from .asking import ask

SAMPLE_S = 1.0  # between samples of the servers' counters while a dataset runs
CURSOR = "cursor.json"  # the dataset the servers' counts are counted for now


def draft_tag(draft: dict, root: Path | None = None) -> str:
    """The folder of a draft's results: its name, and a fingerprint of what it is (its model, method
    and tokens a step; for a folder on this host, its files' names, sizes and times too; a relative
    folder is the job's root's, `root`, as the server sees it), so two drafts, or a draft retrained
    in place, never share counts."""
    model = str(draft["model"])
    facts = [model, draft["method"], draft["num_speculative_tokens"]]
    folder = draft_folder(model, root or Path.cwd())
    if folder is not None and folder.is_dir():
        for f in sorted(folder.iterdir()):
            st = f.stat()
            facts.append([f.name, st.st_size, st.st_mtime_ns])
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", model.rstrip("/").rsplit("/", 1)[-1]) or "draft"
    return f"{name}-{hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:10]}"


@dataclass
class Measured(DatasetCounts):
    """One dataset of the stage: its held-out prompts, its answers, what the servers counted."""

    name: str
    todo: list[Prompt]
    target: int
    done: set[str]
    out: AppendFile | None
    counts_path: Path
    kept: DraftKept = field(default_factory=DraftKept)  # what the servers counted, and its speed
    tokens: int = 0  # output tokens of its answers
    counted: bool = True  # False: the baseline's (no draft, no counters)
    active: ActiveTime = field(init=False)  # its speed: what was kept, and this runner's since

    def __post_init__(self) -> None:
        if self.kept.tokens is None:  # kept by a release before this one: go on from its answers'
            self.kept.tokens = self.tokens
        self.active = ActiveTime(self.kept.seconds, self.kept.tokens)

    def keep(self, now: float) -> None:
        """Its counts and its speed (up to now), read back by a new runner."""
        self.kept.seconds = round(self.active.seconds_at(now), 3)
        self.kept.tokens = self.active.tokens
        self.kept.write(self.counts_path)

    def state(self) -> str:
        idle = not self.todo and not self.in_flight
        if self.counted and self.target and not self.kept.counts.drafts and idle:
            return DatasetState.INCOMPLETE  # answered, and no draft counted: nothing measured
        return self.work_state(len(self.done), bool(self.todo))

    def status(self, now: float, started: float) -> DatasetStatus:
        n = len(self.done)
        return self.work_status(
            now,
            started,
            done=n,
            records=n,
            tokens=self.tokens,
            state=self.state(),
            mean_tokens=self.tokens / n if n else 0.0,
            draft=self.kept.counts if self.counted else None,
        )


class DraftStage(stage.Stage):
    def __init__(self, runner, caps: Caps, force: bool):
        super().__init__(runner)
        self.caps = caps
        self.sets: dict[str, Measured] = {}
        self.current: Measured | None = None
        self.tag = ""
        self.where = self.paths.drafts
        self.cursor: dict = {}
        self.none_left: list[str] = []  # datasets whose cap takes every prompt
        # the baseline: the same prompts, the server without the draft (its speed, no counters)
        self.baseline = not stage_of(caps.stage).needs_draft
        self.clock = time.time  # a test's own clock times its requests

    # ------------------------------------------------------------------ before it runs

    def prepare(self) -> None:
        if self.job.engine.kind == "simulate":
            raise BadInput(
                "the simulated engine has no draft to measure: the draft stage needs the job's "
                "vLLM server (job.engine.kind: openai)"
            )
        # the draft of the server the host started for the stage (hosts.yaml `server.draft`)
        wanted = Supervise.read(self.paths.supervise)
        server = wanted.server.spec if wanted and wanted.server.wanted else None
        draft = server.draft if server else {}
        if self.baseline:  # named for the model served, as a draft's folder for the draft
            served = server.model if server else self.job.engine.model
            draft = {
                "model": served,
                "method": "none",
                "num_speculative_tokens": 0,
                "eval_samples": draft.get("eval_samples") or DraftSpec.eval_samples,
                "baseline": True,
            }
        elif not draft:
            raise BadInput(
                "the draft stage measures the draft of the job's own server (hosts.yaml server:, "
                "started by deploytool): set server.draft.model (a folder on the host or a model "
                "id), then `invoke restart --stage draft` starts the server with it"
            )
        if self.caps.eval_samples is not None:  # `restart --eval-samples K`, kept with the caps
            draft = dict(draft, eval_samples=self.caps.eval_samples)
        try:
            self.tag = ("baseline-" if self.baseline else "") + draft_tag(draft, self.paths.root)
            self.where = self.paths.drafts / self.tag
            self.where.mkdir(parents=True, exist_ok=True)
            write_json(self.where / "draft.json", dict(draft, tag=self.tag))
            self.cursor = read_json(self.where / CURSOR) or {}
            for spec in self.job.datasets:
                if self.caps.selected(spec.name):
                    self._open(spec, int(draft["eval_samples"]))
        except OSError as e:
            raise BadInput(f"the draft stage's files: {e}") from None

    def _held_out(self, spec, k: int) -> tuple[PromptFile, list[int]]:
        """The dataset's prompts no training saw: the first k of its own file for the stage
        (`eval_prompts`), else the first k after its cap; either way none with an answer in the
        training outputs (a cap lowered after they were answered leaves those out)."""
        key = "eval_prompts" if spec.eval_prompts else "prompts"
        path = self.paths.root / (spec.eval_prompts or spec.prompts)
        if not path.exists():
            raise BadInput(
                f"{spec.name}: prompts file {path} not found (deploy it, or fix "
                f"job.datasets.{spec.name}.{key})"
            )
        # the stage's own file is indexed apart: its ids are not the training file's line numbers
        name = f"{spec.name}.eval" if spec.eval_prompts else spec.name
        pf = PromptFile(path, name, self.paths.prompt_index, spec.turns)
        cap = None if spec.eval_prompts else self.caps.target(spec.name)
        trained = load_existing(self.paths.output(spec.name), update_index=False).ids
        start = 0 if spec.eval_prompts else (len(pf) if cap is None else min(cap, len(pf)))
        free = (i for i in range(start, len(pf)) if pf.ids[i] not in trained)
        return pf, list(itertools.islice(free, k))

    def _open(self, spec, k: int) -> None:
        name = spec.name
        pf, held = self._held_out(spec, k)
        if not held:
            self.none_left.append(name)
            self.log(f"{name}: no held-out prompts (its cap takes all {len(pf):,}): not measured")
            pf.close()
            return
        ids = [pf.ids[i] for i in held]
        sig = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:12]
        path, counts_path = self.where / f"{name}.jsonl", self.where / f"{name}.counts.json"
        kept = DraftKept.read(counts_path)
        if kept is not None and kept.held != sig:  # other held-out prompts now: their own counts
            aside = self.where / "before" / (kept.held or "unknown")
            aside.mkdir(parents=True, exist_ok=True)
            for p in (path, counts_path):
                if p.exists():
                    os.replace(p, aside / p.name)
            self.log(f"{name}: its held-out prompts changed (caps or prompts): measured anew")
            kept = None
        kept = kept or DraftKept(sig)
        repair_tail(path, self.log)
        got = load_existing(path, self.log)
        done = got.ids & set(ids)
        todo = [pf[i] for i in held if pf.ids[i] not in done]
        pf.close()
        m = Measured(
            name,
            [p for p in todo if p.messages is not None],
            len(held),
            done,
            AppendFile(path),
            counts_path,
            kept,
            sum(got.tokens[i] for i in done),
            counted=not self.baseline,
        )
        m.failed = len(todo) - len(m.todo)  # unreadable prompt lines
        self.sets[name] = m

    # ------------------------------------------------------------------ while it runs

    async def _sample(self, engine, m: Measured) -> None:
        """Each server's counters: what they counted since `m`'s last sample is `m`'s, when the
        cursor names `m` (else this sample is where `m` starts from, and the cursor names it)."""
        if self.baseline:  # no draft, nothing counted: its speed alone
            m.keep(self.clock())
            return
        mine = self.cursor.get("dataset") == m.name
        kept = m.kept
        if not mine:
            kept.last = {}
        for url in self.urls:
            text = await engine.metrics(url)
            counts = metrics.spec_decode(text) if text else None
            if counts is None and text is not None and self.fatal is None:
                self.fatal = (
                    f"the server at {url} counts no speculative decoding: it runs without a draft "
                    "(`invoke restart --stage draft` starts the job's server with hosts.yaml's)"
                )
            if counts is None:
                continue
            # a server's growth and its new sample together, no await between: a cancel or a
            # stop's keep() at the next await sees both or neither
            if url in kept.last:
                kept.counts = kept.counts.plus(counts.since(kept.last[url]))
            kept.last[url] = counts
        m.keep(self.clock())  # its counts and the samples they reach, in one write
        # the cursor names m only once m's first sample is kept: a kill between counts from there
        if not mine:
            self.cursor = {"dataset": m.name}
            write_json(self.where / CURSOR, self.cursor)

    async def _sampler(self, engine, m: Measured) -> None:
        while True:
            await asyncio.sleep(SAMPLE_S)
            await self._sample(engine, m)

    async def _worker(self, engine, ep: Endpoint, m: Measured) -> None:
        while m.todo and not self.stop.asked and self.fatal is None:
            p = m.todo.pop(0)
            m.in_flight += 1
            try:
                await self._one(engine, ep, m, p)
            finally:
                m.in_flight -= 1

    async def _one(self, engine, ep: Endpoint, m: Measured, p: Prompt) -> None:
        async def once(tries: int) -> int:
            # a try's time is the speed's (DraftKept.seconds); a backoff between tries is not
            m.active.sent(self.clock())
            try:
                reply = await engine.complete(
                    ep.url, p.messages, 0, f"{p.id}-{os.getpid()}-{tries}"
                )
            finally:
                m.active.ended(self.clock())
            rec = Record.one(m.name, p.id, p.index, p.messages, reply)
            try:
                m.out.append(encode_record(rec.to_json()))
            except DiskFull as e:  # nothing of the line was left: asked again on resume
                self.fatal = f"the draft stage's answers: {e}: free space, then restart"
                return 0
            m.done.add(p.id)
            m.new += 1
            m.tokens += reply.completion_tokens
            m.active.add(reply.completion_tokens)
            m.made.add(self.clock(), reply.completion_tokens)
            return reply.completion_tokens

        await ask(self, f"{m.name}: {p.id}", once, m, ep)

    async def _measure(self, engine) -> None:
        """Dataset after dataset: its requests alone in the servers while it is counted."""
        left = self.sets.get(self.cursor.get("dataset"))
        if left is not None:  # a runner killed after its last answers, before it counted them
            await self._sample(engine, left)
        for m in self.sets.values():
            if not m.todo or self.stop.asked or self.fatal:
                continue
            self.current = m
            await self._sample(engine, m)  # what a runner before this one left uncounted
            sampler = asyncio.ensure_future(self._sampler(engine, m))
            try:
                n = self.job.engine.concurrency
                await asyncio.gather(
                    *(self._worker(engine, ep, m) for ep in self.pool.endpoints for _ in range(n))
                )
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler
                await self._sample(engine, m)
                m.out.sync()
            self.log(f"{m.name}: {self.measured_line(m)}")
        self.current = None

    def measured_line(self, m: Measured) -> str:
        c = m.kept.counts
        if c.mean_acceptance_length is None:
            return f"{len(m.done)}/{m.target} answered; no draft counted"
        return (
            f"{len(m.done)}/{m.target} answered; mean acceptance length "
            f"{c.mean_acceptance_length:.2f} ({c.accepted:,.0f} of {c.draft_tokens:,.0f} draft "
            f"tokens accepted over {c.drafts:,.0f} drafts; by position {c.by_position()})"
        )

    def recap(self, caps: Caps) -> None:
        raise ValueError("the draft stage's held-out prompts follow the caps: restart it (--hard)")

    def start_lines(self) -> list[str]:
        lines = [
            f"{n}: {len(m.done)}/{m.target} held-out prompts answered" for n, m in self.sets.items()
        ]
        return [f"caps: {self.caps.line()}; draft {self.tag}"] + lines

    def in_flight(self) -> int:
        return sum(m.in_flight for m in self.sets.values())

    def stopping(self) -> None:
        if self.current is not None:
            self.current.keep(self.clock())

    @contextlib.asynccontextmanager
    async def session(self):
        try:
            async with self.runner.open_engine() as engine, self.watching(engine):
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
        return self.work_status(
            datasets,
            tokens_per_s=sum(d.tokens_per_s for d in datasets.values()),
        )

    def summary(self) -> str:
        return "; ".join(f"{n} {len(m.done)}/{m.target}" for n, m in self.sets.items())

    def progress_line(self) -> str:
        return "draft measured " + self.summary()

    def finished(self) -> str:
        """What the table beside it cannot say: the datasets left unmeasured, and why."""
        parts = [f"{m.failed} of {n}'s prompts failed" for n, m in self.sets.items() if m.failed]
        if self.none_left:
            parts.append(
                f"no held-out prompts in {', '.join(self.none_left)} (the cap takes every prompt)"
            )
        if self.caps.follows():
            parts.append(
                f"the {self.caps.follows()} follows (the watcher starts the server again without "
                "the draft)"
            )
        return "; ".join(parts)
