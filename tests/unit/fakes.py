"""Fakes for the runner's pieces, so each piece is tested alone and in milliseconds: prompts held in
memory, a writer that keeps its lines in lists (and can be told the disk is full), an engine whose
answer to each prompt is scripted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

from remote.common.caps import Caps
from remote.common.jobspec import DatasetSpec, EngineSpec
from remote.common.records import Reply
from remote.job.engine.client import Engine
from remote.job.loop.scheduler import Scheduler
from remote.job.store.datasets import DatasetRun
from remote.job.store.ledger import Ledger
from remote.job.store.outputs import DiskFull
from remote.job.store.prompts import Prompt
from remote.job.store.rates import ActiveTime


class Prompts:
    """What DatasetRun reads of a PromptFile: ids in order, a prompt by index."""

    def __init__(self, dataset: str, n: int, ids: list[str] | None = None):
        self.ids = ids or [f"{dataset}-{i}" for i in range(n)]
        self.problems: dict[int, str] = {}
        self.explicit_ids = True
        self.identity: dict = {}  # a real file says its size and mtime here
        self.closed = False

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> Prompt:
        return Prompt(self.ids[i], i, [{"role": "user", "content": self.ids[i]}])

    def changed_on_disk(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class Lines:
    """An AppendFile that keeps its lines, or refuses them while `full`."""

    def __init__(self):
        self.lines: list = []
        self.full = False

    def append(self, line, *key) -> None:
        if self.full:
            raise DiskFull("no space left on device (a fake)")
        self.lines.append((line, *key))

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


def dataset(name: str = "B1", n: int = 10, done=(), est_tokens: int = 100) -> DatasetRun:
    run = DatasetRun(
        DatasetSpec(name, f"data/prompts/{name}.jsonl", est_tokens),
        Prompts(name, n),
        Ledger(done),
        tokens_of={},
        cut=set(),
        tokens_every=0,
        errors=0,
        out=Lines(),
        err=Lines(),
    )
    run.set_target(None, None)
    return run


@dataclass
class Writer:
    """RecordWriter's surface, recording what it was asked to write."""

    records: list = field(default_factory=list)  # (dataset, id)
    errors: list = field(default_factory=list)  # (dataset, id, reason)
    unwritten: list = field(default_factory=list)
    disk_full: bool = False
    active: ActiveTime = field(default_factory=ActiveTime)  # the job's time answers were being made

    def write_record(self, run, p, c) -> None:
        run.ledger.answered(p.id)
        run.record_done(p, c.completion_tokens)
        self.records.append((run.spec.name, p.id))

    def write_conversation(self, run, p, replies, stopped=None) -> None:
        run.ledger.answered(p.id)
        run.record_done(p, 0)
        self.records.append((run.spec.name, p.id))

    def write_error(self, run, p, reason, attempts) -> None:
        self.errors.append((run.spec.name, p.id, reason))


def completion(tokens: int = 10) -> Reply:
    return Reply("answer", None, "stop", 5, tokens, "m")


class ScriptedEngine(Engine):
    """Answers each prompt by its script: a list of outcomes, one per attempt (an exception to raise,
    or a Reply); a prompt without a script is answered at once."""

    def __init__(self, urls=("http://a",), script: dict | None = None):
        self.model, self.base_urls = "m", list(urls)
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.asked: list[tuple[str, str]] = []  # (url, prompt key)
        self.gate: asyncio.Event | None = None  # set: answers wait for it

    async def complete(self, url, messages, est_tokens, key, keep=None):
        self.asked.append((url, key))
        if self.gate is not None:
            await self.gate.wait()
        outcomes = self.script.get(key)
        out = outcomes.pop(0) if outcomes else completion()
        if isinstance(out, BaseException):
            raise out
        return out

    async def probe(self, url):
        return None


def scheduler(*runs, caps: Caps | None = None) -> Scheduler:
    """A Scheduler over these in-memory datasets, in this order (their job)."""
    job = SimpleNamespace(
        datasets=[r.spec for r in runs], dataset_names=lambda: [r.spec.name for r in runs]
    )
    s = Scheduler(None, job, caps or Caps(), Writer(), lambda line: None)
    s.runs = {r.spec.name: r for r in runs}
    return s


def engine_spec(**kw) -> EngineSpec:
    return EngineSpec(**dict(dict(max_retries=2, retry_base=0.0, down_deadline=60.0), **kw))
