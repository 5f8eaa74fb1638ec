"""The request window: `concurrency` requests in flight on every reachable server, a slot refilled the
moment one frees, and what becomes of each request (recorded, queued again, or filed as an error)."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from ...common.jobspec import EngineSpec
from ..engine.client import (
    Engine,
    EngineDown,
    EngineError,
    JobFault,
    PermanentError,
    Stuck,
    TransientError,
    next_try,
)
from ..engine.kept_tokens import Keeping, KeptFile
from ..engine.meter import StreamMeter
from ..engine.pool import Endpoint, Pool
from ..store import conversation
from ..store.datasets import DatasetRun
from ..store.prompts import Prompt
from ..store.writer import RecordWriter
from .control_requests import StopState
from .scheduler import Scheduler

JOB_FAULT_STREAK = 8  # different prompts in a row with one permanent error: the job's fault

MODEL_FIX = "check job.engine.model against the server's GET /v1/models, and api_key_env"
KEY_FIX = (
    "the server asks for an API key: give that server's hosts.yaml `server:` the key in "
    "env.VLLM_API_KEY (the runner sends it to the server's URL), or set job.engine.api_key_env"
)


class Dispatcher:
    def __init__(
        self,
        engine: Engine,
        pool: Pool,
        scheduler: Scheduler,
        writer: RecordWriter,
        engine_cfg: EngineSpec,
        log: Callable[[str], None],
        stop: StopState | None = None,
    ):
        self.engine, self.pool, self.scheduler = engine, pool, scheduler
        self.writer, self.log = writer, log
        self.eng = engine_cfg  # its retries (client.next_try, every stage's rule), down_deadline
        self.stop = stop or StopState()  # the runner's: no new requests once asked
        self.fatal: str | None = None
        # when the host's watcher was last seen restarting the server: down_deadline counts from then
        self.recovering_at: Callable[[], float] = lambda: 0.0
        self.engine_error: str | None = None
        self.retries = 0
        self.tasks: set[asyncio.Task] = set()
        self._streak: list = []  # (run, prompt, error, attempts): one permanent error in a row
        # unfinished answers' tokens (None: not kept, see continuation.keeping); what that saved
        self.kept: KeptFile | None = None
        self.meter = StreamMeter()  # tokens as they stream: what the ETAs are reckoned at
        self.continued = 0  # answers continued from kept tokens in this run
        self.tokens_saved = 0  # kept tokens those continuations did not make again
        self.started_over = 0  # kept answers asked again from the start (see _refused)
        self._refusals: set[str] = set()
        self.no_token_ids: str | None = None  # return_token_ids asked, none came (said once)

    @property
    def in_flight(self) -> int:
        return len(self.tasks)

    def _next(self, now: float) -> tuple[DatasetRun, Prompt] | None:
        if self.stop.asked or self.fatal or self.writer.disk_full:
            return None
        return self.scheduler.next_prompt(now)

    def has_work(self) -> bool:
        if self.writer.unwritten and not self.fatal:
            return True  # answers waiting for disk space: the window stays open for them
        if self.stop.asked or self.fatal:
            return False
        return self.scheduler.has_work()

    async def window(self) -> None:
        """Keep `concurrency` requests in flight on every reachable server: refill a slot the moment one
        frees (a done-callback wakes us; no O(window) asyncio.wait per completion)."""
        wake = asyncio.Event()
        crashed: list[BaseException] = []

        def done(t: asyncio.Task) -> None:
            self.tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                crashed.append(t.exception())
            wake.set()

        while True:
            now = time.time()
            while (ep := self.pool.pick()) is not None and (nxt := self._next(now)) is not None:
                run, p = nxt
                ep = self._made_on(run, p) or ep
                run.ledger.send(p.id)
                run.active.sent(now)  # the time its answers are being made, the job's too
                self.writer.active.sent(now)
                ep.in_flight += 1
                t = asyncio.ensure_future(self._process(ep, run, p))
                self.tasks.add(t)
                t.add_done_callback(done)
            if crashed:
                raise crashed[0]
            self._check_down(now)
            if self.fatal or (not self.tasks and not self.has_work()):
                return
            wake.clear()
            try:  # also: backoffs due, servers back, stop, caps
                await asyncio.wait_for(wake.wait(), timeout=0.25)
            except asyncio.TimeoutError:
                pass

    def _check_down(self, now: float) -> None:
        gone = self.pool.gone_too_long(now, self.eng.down_deadline, self.recovering_at())
        if gone and not self.fatal:
            self.fatal = f"{gone}: {self.engine_error}"

    async def abandon(self) -> int:
        """Cancel what is still in flight (the grace period is over); they are redone on resume."""
        lost = list(self.tasks)
        for t in lost:
            t.cancel()
        await asyncio.gather(*lost, return_exceptions=True)
        return len(lost)

    async def _process(self, ep: Endpoint, run: DatasetRun, p: Prompt) -> None:
        """One request to one server. Whatever happens, the prompt ends recorded, in the errors file, or
        back in the queue (never lost, never recorded twice)."""
        replies = run.partials.replies(p) if p.turns is not None else None
        try:
            try:
                c = await self._ask(ep, run, p, replies)
            except EngineDown as e:
                self._down(ep, run, p, e)
                return
            except Stuck as e:
                self._stuck(ep, run, p, e)
                return
            except TransientError as e:
                self._transient(ep, run, p, e)
                return
            except PermanentError as e:
                ep.errors += 1
                self.engine_error = str(e)
                if replies and not (isinstance(e, JobFault) or self.fatal):
                    # a later turn refused (the conversation outgrew the context, say): the
                    # turns made are kept and the conversation ends there
                    self.writer.write_conversation(run, p, replies, stopped=str(e))
                    return
                self._permanent(run, p, e)
                return
            self.engine_error = None
            self.end_streak()
            if replies is None:
                self.writer.write_record(run, p, c)
                self._answered(run, p, None)
                self.pool.answered(ep, c.completion_tokens, time.time())
            else:
                self.writer.write_conversation(run, p, replies)
        finally:
            ep.in_flight -= 1
            now = time.time()
            run.active.ended(now)
            self.writer.active.ended(now)
            run.ledger.settle(p)  # cancelled or crashed: queued again, never lost

    async def _ask(self, ep: Endpoint, run: DatasetRun, p: Prompt, replies: list | None):
        """One request; for a conversation, every turn not yet answered, one after the other on
        this server (its prefix is in this server's cache, and the slot never drains between
        turns). Each finished turn goes to the sidecar at once; `replies` grows in place."""
        if replies is None:
            return await self._one(ep, run, p, p.messages, None)
        while not conversation.finished(p, replies):
            msgs = conversation.request(p, replies)
            c = await self._one(ep, run, p, msgs, len(replies))
            replies.append(c)
            self._answered(run, p, len(replies) - 1)
            self.pool.answered(ep, c.completion_tokens, time.time())
            run.ledger.turn_answered(p.id)
            if not conversation.finished(p, replies):
                run.partials.add(p, len(replies) - 1, replies[-1])
        return None

    def _key(self, run: DatasetRun, p: Prompt, turn: int | None) -> str:
        return f"{run.spec.name}\t{p.id}" + ("" if turn is None else f"\t{turn}")

    async def _one(self, ep: Endpoint, run: DatasetRun, p: Prompt, msgs: list, turn: int | None):
        """One answer, its tokens counted as they stream (the ETAs' measure)."""
        with self.meter.flow(run.spec.name):
            return await self._answer(ep, run, p, msgs, turn)

    async def _answer(self, ep: Endpoint, run: DatasetRun, p: Prompt, msgs: list, turn: int | None):
        """One answer; its tokens kept while it streams, continued where some were kept."""
        if self.kept is None:
            return await self.engine.complete(ep.url, msgs, run.spec.est_tokens, p.id)
        key = self._key(run, p, turn)
        keep = self.kept.start(key, self.engine.signature(msgs), ep.url)
        if keep.continuing and (why := await self._cannot_continue(ep, keep)):
            self._refused(run, p, key, why)
            keep = self.kept.start(key, keep.base.sig, ep.url)
        elif not keep.continuing:
            await self.engine.end_of_thinking(ep.url)  # known before the end marker streams
        try:
            c = await self.engine.complete(ep.url, msgs, run.spec.est_tokens, p.id, keep)
            if c.token_ids is None and self.no_token_ids is None:
                self.no_token_ids = f"{ep.url} sends no token ids: restarts redo answers in flight"
                self.log(self.no_token_ids)
            if keep.continuing:
                self.continued += 1
                self.tokens_saved += len(keep.base.ids)
            return c
        except PermanentError as e:
            if not keep.continuing:
                self.kept.settle(keep)
                raise
            # the server refused the token-id prompt: asked again from the start, said once
            self._refused(run, p, key, f"the server refused the continuation ({e})")
            raise TransientError(f"continuation refused: {e}") from None
        except BaseException:
            self.kept.settle(keep)  # what it made stays kept: the next attempt continues it
            raise

    def _made_on(self, run: DatasetRun, p: Prompt) -> Endpoint | None:
        """A kept answer goes back to the server that made it, where that one has a free slot:
        its prefix cache still holds the prefix."""
        if self.kept is None or not self.kept.entries:
            return None
        turn = len(run.partials.replies(p)) if p.turns is not None else None
        k = self.kept.entries.get(self._key(run, p, turn))
        for e in self.pool.endpoints if k is not None and k.url else ():
            if e.url == k.url and e.reachable and e.in_flight < e.concurrency:
                return e
        return None

    async def _cannot_continue(self, ep: Endpoint, keep: Keeping) -> str | None:
        kept = keep.base
        if kept.thinking is None:
            return "its kept tokens have no text yet"
        if kept.thinking and await self.engine.end_of_thinking(ep.url) is None:
            return "it was cut inside its thinking and the server has no /tokenize for the marker"
        return None

    def _refused(self, run: DatasetRun, p: Prompt, key: str, why: str) -> None:
        self.kept.end(key)
        self.started_over += 1
        reason = why.split(" (")[0]
        if reason not in self._refusals:  # each reason said once
            self._refusals.add(reason)
            self.log(f"{run.spec.name} {p.id}: not continued, asked again from its start: {why}")

    def _answered(self, run: DatasetRun, p: Prompt, turn: int | None) -> None:
        if self.kept is not None:
            self.kept.end(self._key(run, p, turn))

    def _down(self, ep: Endpoint, run: DatasetRun, p: Prompt, e: EngineDown) -> None:
        now = time.time()
        self.pool.mark_down(ep, str(e), now)
        self.engine_error = str(e)
        self._requeue(run, p, e, lambda n: f"servers went away under it {n} times: {e}", now)

    def _stuck(self, ep: Endpoint, run: DatasetRun, p: Prompt, e: Stuck) -> None:
        """Abandoned for no progress: sent again, like a failover requeue (the server stays up: it
        answers other requests; a dead data-parallel rank behind it hangs only some)."""
        now = time.time()
        self.pool.stuck(ep, now)
        self.log(f"{run.spec.name} {p.id}: stuck on {ep.url} ({e}): abandoned, sent again")
        self._requeue(run, p, e, lambda n: f"stuck {n} times, last: {e}", now)

    def _requeue(
        self, run: DatasetRun, p: Prompt, e: EngineError, why: Callable[[int], str], now: float
    ) -> None:
        n = run.ledger.went_away(p.id)
        if next_try(e, n, self.eng) is None:  # a prompt that takes every server down, or hangs
            self.writer.write_error(run, p, why(n), n)
            run.ledger.fail(p.id)
            return
        run.ledger.requeue(p, now)  # not a retry of the prompt: another server (or slot) takes it

    def _transient(self, ep: Endpoint, run: DatasetRun, p: Prompt, e: TransientError) -> None:
        n = run.ledger.failed_attempt(p.id)
        self.retries += 1
        ep.errors += 1
        self.engine_error = str(e)
        if e.timeout:
            ep.check_now = True  # is the server still there?
        wait = next_try(e, n, self.eng)
        if wait is None:
            self.writer.write_error(run, p, f"gave up after {n} attempts: {e}", n)
            run.ledger.fail(p.id)
            return
        run.ledger.requeue(p, time.time() + wait)

    def _permanent(self, run: DatasetRun, p: Prompt, e: PermanentError) -> None:
        """A prompt's own fault goes to its errors file. The job's fault (a model the server does not
        serve, credentials; or one message for many prompts in a row) fails the job at once and files
        nothing: 56,000 prompts moved to errors by one typo would each have to be asked again anyway."""
        # after a fault, answers still in flight are no prompt's fault
        if isinstance(e, JobFault) or self.fatal:
            run.ledger.requeue(p, time.time())  # unfiled, and never lost
            self._job_fault(str(e), KEY_FIX if e.status == 401 else None)
            return
        run.ledger.fail(p.id)  # not asked again in this run, filed once the streak ends
        streak = self._streak
        if streak and streak[0][2] != str(e):
            self.end_streak()
        streak.append((run, p, str(e), run.ledger.attempts.get(p.id, 0) + 1))
        if len(streak) >= JOB_FAULT_STREAK:
            for r, q, _, _ in streak:
                r.ledger.unfail(q.id)
            streak.clear()
            self._job_fault(f"{e} (the same answer for {JOB_FAULT_STREAK} prompts in a row)")

    def _job_fault(self, why: str, fix: str | None = None) -> None:
        if not self.fatal:
            self.fatal = (
                f"the server refuses the job, not a prompt: {why}; nothing was filed as an error "
                f"({fix or MODEL_FIX})"
            )

    def end_streak(self) -> None:
        """Permanent errors held back while they might have been the job's fault: file them."""
        for run, p, why, attempts in self._streak:
            self.writer.write_error(run, p, why, attempts)
        self._streak.clear()
