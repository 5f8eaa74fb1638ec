"""The hidden-states stage: every reply the job kept, as its exact tokens, through the server once
more for the target's hidden states, each file checked before it counts. Resumable: a row counts
once it is in its dataset's rows.jsonl, and a row a kill cut off is asked again."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import time

from ...common.caps import Caps
from ...common.codec import read_json, write_json
from ...common.records import TokenRow
from ...common.status import DiskStatus, JobState
from ..engine.client import JobFault
from ..engine.pool import Endpoint
from ..hidden import hsfile
from ..hidden.progress import DiskGuard, Stage
from ..hidden.rows import Rows, rows_of
from ..hidden.store import HiddenStore
from ..observe.status_builder import set_etas
from ..store.outputs import disk_usage
from ..store.prompts import dataset_target
from ..store.rates import ActiveTime, RateWindow
from . import stage
from .asking import AskAgain, ask

WRITE_WAIT_S = 300.0  # a file the server named and still writes after this long is asked again
BAD_FILE_TRIES = 3  # a row whose file is bad this often fails (the next restart tries it again)
DISK_CHECK_S = 3.0  # between looks at the free space while the disk is full


class HiddenStage(stage.Stage):
    def __init__(self, runner, caps: Caps, force: bool):
        """`force`: go on when the rows left do not fit the free space (it pauses before the disk
        fills, while pull --free takes files off); the records are read as they are."""
        super().__init__(runner)
        self.caps = caps
        paths = runner.paths
        self.incoming = paths.hidden_incoming
        self.stages: dict[str, Stage] = {}
        self.rows_made = RateWindow()
        self.tokens_made = RateWindow()
        self.active = ActiveTime()  # the job's: any row in flight (each dataset's: its Stage's)
        self.redone = 0  # files found bad and asked again
        self.untokened = 0  # records in the caps without token ids: no row can be made of them
        self.flying: set[str] = set()  # row ids in flight
        self.committing, self.commit_job = asyncio.Lock(), None
        self.requesting: dict[str, asyncio.Semaphore] = {}  # per server: its concurrency
        self.free_bytes = lambda: disk_usage(self.paths.hidden_states)["free_bytes"]
        self._kept: dict | None = None  # made.json as last read or written
        notify = lambda why: runner.notifier.send(  # noqa: E731
            "disk_full", f"{paths.root}: hidden states paused, disk full: {why}"
        )
        self.disk = DiskGuard(lambda: self.free_bytes(), force, self.log, notify)

    # ------------------------------------------------------------------ before it runs

    def _clear_incoming(self) -> None:
        """The server's files of rows never committed (a kill cut their requests off; the server may
        write one after its asker is gone): no request of this job is in flight now."""
        self.incoming.mkdir(parents=True, exist_ok=True)
        for p in self.incoming.iterdir():
            if p.name.endswith((".safetensors", ".lock")):
                _remove(p)

    def prepare(self) -> None:
        self._clear_incoming()  # before it starts
        for spec in self.job.datasets:
            name = spec.name
            store = HiddenStore(self.paths.hidden_states, name, self.log).open()
            got = self._rows(spec, self.caps)
            self.stages[name] = Stage(name, store, got.rows, self.caps.max_tokens)
            self.untokened += got.untokened
            if got.untokened:
                self.log(
                    f"{name}: {got.untokened} records have no token ids (made without "
                    "extra_body.return_token_ids): they cannot be extracted and are left out"
                )
        self._made_before()
        if self.untokened and not any(st.target for st in self.stages.values()):
            self.fatal = (  # every row would be left out: say why rather than finish with none
                f"the job's {self.untokened} records hold no token ids, and the stage extracts the "
                "exact ids the target saw: set job.extra_body.return_token_ids: true in hosts.yaml "
                "and `invoke deploy`; the answers made from then on can be extracted"
            )
        # known before any request (the rows made, records without ids): refused at once, so the
        # start is seen to fail
        self.fatal = self.fatal or self.disk.refusal(self.stages.values())

    def _made_before(self) -> None:
        """The stage's time and tokens so far, every runner's (made.json): a rate over its life,
        as the answers' is, which stays said once it is done."""
        kept = read_json(self.paths.hidden_made) or {}
        for name, a in [("", self.active)] + [(n, st.active) for n, st in self.stages.items()]:
            got = ActiveTime.of_kept(kept.get(name)) or ActiveTime()
            a.seconds, a.tokens = got.seconds, got.tokens
        self._kept = kept  # read: from now on it may be written

    def _keep_made(self, now: float) -> None:
        """made.json, for the next runner: written with each status (a kill -9 loses a second)."""
        if self._kept is None:  # a status before prepare: the last runner's not read yet
            return
        made = [("", self.active)] + [(n, st.active) for n, st in self.stages.items()]
        kept = {n: a.kept(now) for n, a in made}
        if kept != self._kept:
            write_json(self.paths.hidden_made, kept, sync=False)
            self._kept = kept

    def _rows(self, spec, caps: Caps) -> Rows:
        name = spec.name
        target = caps.target(name) if caps.selected(name) else 0
        if target == 0:
            return Rows()
        return rows_of(self.paths.output(name), dataset_target(self.paths, spec, target))

    # ------------------------------------------------------------------ while it runs

    def _next(self) -> tuple[Stage, TokenRow] | None:
        for st in self.stages.values():  # in job order, as the generation
            if st.todo and not st.budget_reached():
                return st, st.todo.popleft()
        return None

    async def _worker(self, engine, ep: Endpoint) -> None:
        slots = self.job.engine.concurrency * max(1, len(self.urls))
        while not self.stop.asked and self.fatal is None:
            if self.disk.paused(self.stages.values(), slots):
                await asyncio.sleep(DISK_CHECK_S)  # until space is freed: a pause, not a stop
                continue
            item = self._next()
            if item is None:
                return
            st, row = item
            st.in_flight += 1
            self.flying.add(row.id)
            timed = (self.active, st.active)  # one object across a re-cap (recap keeps it)
            for a in timed:
                a.sent(time.time())
            try:
                await self._one(engine, ep, st, row)
            finally:
                self.flying.discard(row.id)
                self.stages[st.name].in_flight -= 1  # a re-cap may have made the dataset anew
                for a in timed:
                    a.ended(time.time())

    async def _one(self, engine, ep: Endpoint, st: Stage, row: TokenRow) -> None:
        bad = 0

        async def once(tries: int) -> int:
            nonlocal bad
            path = None
            try:
                key = f"{row.id}-{os.getpid()}-{tries}"
                async with self.requesting[ep.url]:  # the server's slots: a row past its answer
                    path = self._ours(  # frees its slot while its file is waited for and checked
                        await engine.hidden_states(ep.url, row.input_ids, key, self.incoming)
                    )
                await hsfile.wait_written(path, WRITE_WAIT_S)
                # a file is read and synced in threads: the loop goes on serving the streams
                facts = await asyncio.to_thread(self._checked, st, path, row)
            except hsfile.BadFile as e:
                bad += 1
                self.redone += 1
                self.log(f"{st.name}: {row.id}: {e}: asked again")
                _remove(path)
                _remove(hsfile.lock_path(path) if path else None)
                if bad < BAD_FILE_TRIES:
                    raise AskAgain from None
                st.failed += 1
                self.log(f"{st.name}: {row.id}: {bad} bad files: left for the next restart")
                return 0
            async with self.committing:  # one at a time: a row's n is the ledger's next
                job = asyncio.ensure_future(asyncio.to_thread(st.store.commit, row, path, facts))
                self.commit_job = job
                await asyncio.shield(job)  # a stop's cancel leaves it to end (see _main)
            _remove(hsfile.lock_path(path))
            st.new += 1
            if not self.disk.checked:  # the first row says what a token takes
                self.fatal = self.fatal or self.disk.refusal(self.stages.values())
            now = time.time()
            self.rows_made.add(now, 1)
            self.tokens_made.add(now, facts.tokens)
            st.made.add(now, facts.tokens)
            self.active.add(facts.tokens)
            st.active.add(facts.tokens)
            return facts.tokens

        await ask(self, f"{st.name}: {row.id}", once, st, ep)

    def _ours(self, path):
        """The server's file, only inside the stage's own folder: nothing outside it is ever moved
        or deleted (a file put elsewhere is the job's fault: it stops, the fix in one line)."""
        where = os.path.realpath(path)
        inside = os.path.dirname(where) == os.path.realpath(self.incoming)
        if not (inside and where.endswith(".safetensors")):
            raise JobFault(
                f"the server wrote the hidden states to {path}, outside {self.incoming}: set "
                f"shared_storage_path in its --kv-transfer-config to {self.incoming}"
            )
        return path

    def _checked(self, st: Stage, path, row: TokenRow) -> hsfile.Checked:
        shape = st.store.shape
        facts = hsfile.check(path, row.input_ids, shape[0] if shape else None)
        if shape and (facts.hidden, facts.dtype) != shape[1:]:
            raise hsfile.BadFile(
                f"{path.name}: hidden size {facts.hidden} {facts.dtype}, the dataset's rows have "
                f"{shape[1]} {shape[2]}"
            )
        return facts

    def recap(self, caps: Caps) -> None:
        """New caps, live: each dataset's rows to make again from its records (rows in flight are
        not asked twice)."""
        if caps.stage != self.caps.stage:
            raise ValueError("a change of stage restarts the runner (restart --hard)")
        specs = {spec.name: spec for spec in self.job.datasets}
        for name, st in self.stages.items():
            fresh = Stage(name, st.store, self._rows(specs[name], caps).rows, caps.max_tokens)
            fresh.failed, fresh.new, fresh.in_flight = st.failed, st.new, st.in_flight
            fresh.made, fresh.active = st.made, st.active
            fresh.todo = collections.deque(r for r in fresh.todo if r.id not in self.flying)
            self.stages[name] = fresh
        self.caps = caps

    def start_lines(self) -> list[str]:
        lines = [
            f"{n}: {st.done}/{st.target} rows have their hidden states"
            for n, st in self.stages.items()
        ]
        return ["caps: " + self.caps.line()] + lines

    def in_flight(self) -> int:
        return sum(st.in_flight for st in self.stages.values())

    @contextlib.asynccontextmanager
    async def session(self):
        """The engine opened and the workers ready: yields the work to run until done."""
        try:
            async with self.runner.open_engine() as engine, self.watching(engine) as pool:
                n = self.job.engine.concurrency
                self.requesting = {url: asyncio.Semaphore(n) for url in self.urls}
                # twice the rows the servers take: theirs never wait for a commit
                yield asyncio.gather(
                    *(self._worker(engine, ep) for ep in pool.endpoints for _ in range(2 * n))
                )
        finally:
            if self.commit_job is not None:  # a commit a cancelled row left in its thread ends
                await asyncio.wait({self.commit_job})
            for st in self.stages.values():
                st.store.close()

    async def abandon(self) -> int:
        return len(self.flying)  # asked again on resume: a row counts once committed

    def status(self, now: float) -> dict:
        """What status.json says of the work, beside the runner's own fields."""
        disk = disk_usage(self.paths.hidden_states)
        datasets = {n: st.status(now, self.runner.started_at) for n, st in self.stages.items()}
        per_s = self.rows_made.per_s(now, self.runner.started_at)
        left = {n: max(0, d.target - d.done) for n, d in datasets.items()}
        set_etas(datasets, left, per_s)  # a dataset's ETA where the job's is, at its pace
        self._keep_made(now)
        return self.work_status(
            datasets,
            tokens_per_s=self.tokens_made.per_s(now, self.runner.started_at),
            mean_tokens_per_s=self.active.per_s(now),
            samples_per_s=per_s,
            eta_s=int(sum(left.values()) / per_s) if per_s > 0 else None,
            eta_guess=False,  # at this runner's own rows
            disk=DiskStatus(disk["free_bytes"], disk["total_bytes"], self.disk.full),
        )

    def summary(self) -> str:
        return "; ".join(f"{n} {st.done}/{st.target}" for n, st in self.stages.items())

    def progress_line(self) -> str:
        return "hidden states " + self.summary()

    def finished(self) -> str:
        failed = sum(st.failed for st in self.stages.values())
        parts = [f"{failed} rows failed: a restart asks them again"] if failed else []
        if self.untokened:  # said where the user looks, not only in the log
            parts.append(f"{self.untokened} records without token ids left out")
        return "; ".join(parts)

    def ended(self) -> None:
        self._keep_made(time.time())  # nothing in flight now: its last seconds counted
        if self.runner.state == JobState.FINISHED:  # every row made: no file is left behind
            self._clear_incoming()


def _remove(path) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
