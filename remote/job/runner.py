"""The runner: every selected prompt through the engine, a continuous window of requests in flight.

Resumable (records already written are skipped by id), capped (first N prompts per dataset, a token
budget), durable (one complete line per record, fsync every second), and re-cappable while running
(run/control.json).
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import heapq
import itertools
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..common import procinfo
from ..common.jobspec import (
    JOB_TOKEN_ENV,
    Caps,
    Dataset,
    Job,
    Paths,
    release_dir,
    write_json_atomic,
)
from ..common.status import (
    COMPLETE,
    FAILED,
    FINISHED,
    INCOMPLETE,
    PENDING,
    RUNNING,
    STARTING,
    STOPPED,
    DatasetStatus,
    EngineStatus,
    JobStatus,
)
from .engine import EngineDown, PermanentError, TransientError, backoff, make_engine
from .history import History
from .notify import Notifier
from .outputs import (
    AppendFile,
    DiskFull,
    count_lines,
    disk_usage,
    encode_record,
    load_existing,
    repair_tail,
)
from .pool import Endpoint, Pool
from .prompts import Prompt, PromptFile

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
RATE_WINDOW = 60.0
JOB_FAULT_STREAK = 8  # different prompts in a row with one permanent error: the job's fault
FINGERPRINT_ABSENT = {"extra_body": {}}
_SEQ = itertools.count()  # tie-break in the retry queue: prompts never compare


class BadInput(Exception):
    pass


class LockHeld(Exception):
    pass


class Log:
    def __init__(self, path: Path, echo: bool):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a", buffering=1)
        self.echo = echo

    def __call__(self, msg: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}"
        try:
            self.f.write(line + "\n")
        except OSError:
            pass  # a full disk under logs/ must not take the job down with it
        if self.echo:
            print(line, file=sys.stderr, flush=True)


def acquire_lock(paths: Paths):
    """One runner per remote_dir: an flock held for the runner's life (released by the kernel on kill -9)."""
    paths.ensure()
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = procinfo.read_json(paths.pidfile) or {}
        raise LockHeld(
            f"another runner is already running in {paths.root} (pid {holder.get('pid', '?')})"
        ) from None
    return fd


@dataclass
class DatasetRun:
    spec: Dataset
    prompts: PromptFile
    done: set[str]
    tokens_total: int  # response tokens of every record of the dataset (the budget counts them)
    errors: int
    out: AppendFile
    err: AppendFile
    target_n: int = 0
    done_in_target: int = 0
    next_pos: int = 0
    in_flight: set[str] = field(default_factory=set)
    # permanent failures in this run: not retried until restart
    failed: set[str] = field(default_factory=set)
    new_records: int = 0
    finish_length: int = 0
    empty: int = 0
    events: collections.deque = field(default_factory=collections.deque)  # (t, tokens)
    budget: int | None = None
    # in flight across a reload: id -> new index
    reindexed: dict[str, int] = field(default_factory=dict)
    prompts_changed: bool = False  # the file on disk is newer than the one in use
    # prompts to send again (a retry after its backoff, or back from a server that went away)
    queue: list = field(default_factory=list)  # heap of (not before, seq, Prompt)
    queued: set[str] = field(default_factory=set)
    # transient failures per prompt in this run
    attempts: dict[str, int] = field(default_factory=dict)
    # times a server went away under the prompt
    requeues: dict[str, int] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)  # answered, waiting for disk space to be written

    @property
    def completion_tokens(self) -> int:
        return self.tokens_total

    def set_target(self, n: int | None, budget: int | None) -> None:
        self.target_n = len(self.prompts) if n is None else min(n, len(self.prompts))
        self.done_in_target = sum(
            1 for pid in self.prompts.ids[: self.target_n] if pid in self.done
        )
        self.next_pos = min(self.next_pos, self.target_n)
        self.budget = budget

    def budget_reached(self) -> bool:
        return self.budget is not None and self.tokens_total >= self.budget

    def requeue(self, p: Prompt, not_before: float) -> None:
        self.queued.add(p.id)
        heapq.heappush(self.queue, (not_before, next(_SEQ), p))

    def _skip(self, pid: str) -> bool:
        return (
            pid in self.done
            or pid in self.in_flight
            or pid in self.failed
            or pid in self.queued
            or pid in self.held
        )

    def next_prompt(self, now: float) -> Prompt | None:
        if self.budget_reached():
            return None
        while self.queue and self.queue[0][0] <= now:
            p = heapq.heappop(self.queue)[2]
            self.queued.discard(p.id)
            if (
                p.id not in self.done and p.index < self.target_n
            ):  # a re-cap may have lowered the target
                return p
        ids = self.prompts.ids
        while self.next_pos < self.target_n:
            i = self.next_pos
            self.next_pos += 1
            if self._skip(ids[i]):
                continue
            return self.prompts[i]  # read and parsed only now
        return None

    def has_work(self) -> bool:
        """Something is left to send, now or after a backoff (without taking it)."""
        if self.budget_reached():
            return False
        if self.queue:
            return True
        ids = self.prompts.ids
        while self.next_pos < self.target_n and self._skip(ids[self.next_pos]):
            self.next_pos += 1
        return self.next_pos < self.target_n

    def record_done(self, p: Prompt, tokens: int) -> None:
        self.done.add(p.id)
        self.tokens_total += tokens
        self.new_records += 1
        index = self.reindexed.pop(p.id, p.index)
        if 0 <= index < self.target_n:
            self.done_in_target += 1

    def reload(self, new: PromptFile) -> None:
        """Use `new` from now on. Requests in flight keep the prompt they were sent with; their ids are
        looked up in the new file so they count towards its target (or not, if they left it)."""
        if self.in_flight:
            self.reindexed = {pid: -1 for pid in self.in_flight}
            for i, pid in enumerate(new.ids):
                if pid in self.reindexed:
                    self.reindexed[pid] = i
        old, self.prompts = self.prompts, new
        old.close()
        self.next_pos = 0  # scan the new order once; done and in-flight ids are skipped
        self.prompts_changed = False

    def state(self) -> str:
        if self.done_in_target >= self.target_n or (self.budget_reached() and not self.in_flight):
            return COMPLETE
        if self.in_flight or self.queue:
            return RUNNING
        if self.next_pos >= self.target_n and self.failed:
            return INCOMPLETE  # every prompt tried; the missing ones are in <DS>.errors.jsonl
        return RUNNING if self.new_records else PENDING


class Runner:
    def __init__(
        self,
        paths: Paths,
        job: Job,
        caps: Caps,
        *,
        grace: float = 30.0,
        force: bool = False,
        echo: bool = False,
    ):
        self.paths, self.job, self.caps = paths, job, caps
        self.grace, self.force = grace, force
        self.log = Log(paths.log, echo)
        self.engine_cfg = job.engine
        self.concurrency = int(job.engine.get("concurrency", 256))  # per server
        self.max_retries = int(job.engine.get("max_retries", 8))
        self.max_requeues = max(16, 2 * self.max_retries)
        self.pool: Pool | None = None
        self.retry_base = float(job.engine.get("retry_base", 1.0))
        self.down_deadline = float(job.engine.get("down_deadline", 1800))
        self.stall_after = float(job.engine.get("stall_minutes", 10)) * 60
        self.model_name = (
            "simulated"
            if job.engine.get("kind") == "simulate"
            else job.engine.get("model", "default")
        )
        self.runs: dict[str, DatasetRun] = {}
        self.state = STARTING
        self.message = ""
        self.stopping = False
        self.draining = False
        self.fatal: str | None = None
        self.engine_error: str | None = None
        self.last_completion = time.time()
        self.started_at = time.time()
        self.retries = 0
        self.control_seq = 0
        self.control_error: str | None = None
        self._control_mtime = None
        self.token = os.environ.get(JOB_TOKEN_ENV) or os.urandom(8).hex()
        self.in_flight_total = 0
        self.abandoned = 0  # in-flight requests cut off by a stop (redone on resume)
        # prompt files reloaded by the last re-cap: name -> {from, to}
        self.reloaded: dict[str, dict] = {}
        self.notifier = Notifier(job.notify, paths.root, self.log)
        self.history = History(paths.run / "history.jsonl")
        self.metrics_interval = float(job.engine.get("metrics_interval", 10))
        self.gpus: list | None = None
        # a full disk: finished answers wait here (the window bounds them) until an append succeeds
        self.disk_full = False
        self.unwritten: list = []  # callables that each write one held record or error line, in order
        self.bytes_events: collections.deque = collections.deque()  # (t, bytes appended)
        self._alerts: set[str] = set()  # conditions notified and not yet cleared
        self._streak: list = []  # (run, prompt, error, attempts): one permanent error in a row

    # ------------------------------------------------------------------ preparation

    def fingerprint(self) -> dict:
        return {
            "model": self.model_name,
            "sampling": self.job.sampling,
            "chat_template_kwargs": self.job.chat_template_kwargs,
            "extra_body": self.job.extra_body,
        }

    def _open_dataset(self, spec: Dataset) -> DatasetRun:
        path = self.paths.root / spec.prompts
        if not path.exists():
            raise BadInput(
                f"{spec.name}: prompts file {path} not found (deploy it, or fix job.datasets.{spec.name}.prompts)"
            )
        out_path = self.paths.output(spec.name)
        repair_tail(out_path, self.log)
        repair_tail(self.paths.errors(spec.name), self.log)
        existing = load_existing(out_path, self.log)
        if existing.duplicates:
            self.log(
                f"{spec.name}: {existing.duplicates} duplicate ids in {out_path.name} (first record of each kept)"
            )
        meta_path = self.paths.meta(spec.name)
        fp = json.loads(json.dumps(self.fingerprint()))  # as it reads back from JSON
        meta = procinfo.read_json(meta_path)
        # a key the meta file predates reads as its empty value: adding a setting later is no change
        old = {k: meta.get(k, FINGERPRINT_ABSENT.get(k)) for k in fp} if meta else None
        if old is None:
            write_json_atomic(meta_path, fp)
        elif old != fp:
            if existing.ids:
                diff = ", ".join(k for k in fp if old.get(k) != fp[k])
                if not self.force:
                    raise BadInput(
                        f"{spec.name}: {len(existing.ids)} records were made with different {diff} "
                        f"({old}); resuming would mix settings in one dataset: restore the settings, "
                        f"move {out_path.name} aside, or pass --force"
                    )
                self.log(f"{spec.name}: --force: resuming with changed {diff}")
                fp = dict(fp, previous=[old] + list(meta.get("previous", [])))
            write_json_atomic(meta_path, fp)  # what the records from now on are made with
        prompts = PromptFile(path, spec.name, cache_dir=self.paths.run / "prompt-index")
        run = DatasetRun(
            spec,
            prompts,
            existing.ids,
            sum(existing.tokens.values()),
            count_lines(self.paths.errors(spec.name)),
            AppendFile(out_path, indexed=True),
            AppendFile(self.paths.errors(spec.name)),
        )
        return run

    def _reloads(self, caps: Caps) -> dict[str, PromptFile]:
        """The prompt files a deploy replaced under selected datasets, opened and checked; raises
        BadInput (closing them all) where reloading would make an old id name another prompt."""
        fresh: dict[str, PromptFile] = {}
        try:
            for name, run in self.runs.items():
                if not caps.selected(name) or not run.prompts.changed_on_disk():
                    continue
                new = PromptFile(run.prompts.path, name, cache_dir=self.paths.run / "prompt-index")
                fresh[name] = new
                if not (
                    run.prompts.is_prefix_of(new) or (run.prompts.explicit_ids and new.explicit_ids)
                ):
                    raise BadInput(
                        f"{name}: {run.spec.prompts} was rewritten, not only appended to, and its prompts have "
                        f"no `id`: line-number ids of the {len(run.done)} records already written could now name "
                        "other prompts, so it is not reloaded live and nothing changed. Give every prompt an "
                        "`id` (then it reloads live), or `invoke restart --hard` to start from the new file"
                    )
        except BaseException:
            for pf in fresh.values():
                pf.close()
            raise
        return fresh

    def apply_caps(self, caps: Caps) -> None:
        reloads = self._reloads(caps)  # checked before anything changes
        try:
            for (
                spec
            ) in self.job.datasets:  # open what is newly selected first: a failure changes nothing
                if caps.selected(spec.name) and spec.name not in self.runs:
                    self.runs[spec.name] = self._open_dataset(spec)
        except BaseException:
            for pf in reloads.values():
                pf.close()
            raise
        self.reloaded = {}
        for name, new in reloads.items():
            run = self.runs[name]
            self.reloaded[name] = {"from": len(run.prompts), "to": len(new)}
            run.reload(new)
            self.log(
                f"{name}: prompts file changed on the host: reloaded, {self.reloaded[name]['from']} -> "
                f"{len(new)} prompts"
            )
        self.caps = caps
        for name, run in self.runs.items():
            if caps.selected(name):
                run.set_target(caps.target(name), caps.max_tokens)
            else:
                run.set_target(0, caps.max_tokens)  # deselected live: dispatch nothing more
        for name in reloads:
            self._report_problems(self.runs[name])

    def prepare(self) -> None:
        unknown = [
            n
            for n in (self.caps.datasets or []) + list(self.caps.caps)
            if n not in self.job.names()
        ]
        if unknown:
            raise BadInput(
                f"unknown dataset {', '.join(unknown)}; the job has {', '.join(self.job.names())}"
            )
        self.apply_caps(self.caps)
        for run in self.runs.values():
            self._report_problems(run)

    def _report_problems(self, run: DatasetRun) -> None:
        """Unreadable prompt lines inside the target: into errors.jsonl once, never sent."""
        if not run.prompts.problems:
            return
        reported = error_ids(self.paths.errors(run.spec.name))
        for index in sorted(run.prompts.problems):
            p = run.prompts[index]
            if index < run.target_n and p.id not in run.done:
                if p.id not in reported:  # said once in errors.jsonl, not again on every start
                    self._write_error(run, p, p.problem or "unreadable prompt", 0)
                run.failed.add(p.id)

    # ------------------------------------------------------------------ the window

    def next_prompt(self, now: float) -> tuple[DatasetRun, Prompt] | None:
        if self.stopping or self.draining or self.fatal or self.disk_full:
            return None
        for spec in self.job.datasets:  # job order: the window rolls from one dataset into the next
            run = self.runs.get(spec.name)
            if run is None:
                continue
            p = run.next_prompt(now)
            if p is not None:
                return run, p
        return None

    def has_work(self) -> bool:
        if self.unwritten and not self.fatal:
            return True  # answers waiting for disk space: the window stays open for them
        if self.stopping or self.draining or self.fatal:
            return False
        return any(run.has_work() for run in self.runs.values())

    async def _process(self, engine, ep: Endpoint, run: DatasetRun, p: Prompt) -> None:
        """One request to one server. Whatever happens, the prompt ends recorded, in the errors file, or
        back in the queue (never lost, never recorded twice)."""
        try:
            try:
                c = await engine.complete(ep.url, p.messages, run.spec.est_tokens, p.id)
            except EngineDown as e:
                now = time.time()
                self.pool.mark_down(ep, str(e), now)
                self.engine_error = str(e)
                n = run.requeues[p.id] = run.requeues.get(p.id, 0) + 1
                if n > self.max_requeues:  # a prompt that takes every server down with it
                    self._write_error(run, p, f"servers went away under it {n} times: {e}", n)
                    run.failed.add(p.id)
                    return
                run.requeue(p, now)  # not a retry of the prompt: another server takes it
                return
            except TransientError as e:
                n = run.attempts[p.id] = run.attempts.get(p.id, 0) + 1
                self.retries += 1
                ep.errors += 1
                self.engine_error = str(e)
                if e.timeout:
                    ep.check_now = True  # is the server still there?
                if n > self.max_retries:
                    self._write_error(run, p, f"gave up after {n} attempts: {e}", n)
                    run.failed.add(p.id)
                    return
                run.requeue(p, time.time() + backoff(n - 1, self.retry_base))
                return
            except PermanentError as e:
                ep.errors += 1
                self.engine_error = str(e)
                self._permanent(run, p, e)
                return
            self.engine_error = None
            self._end_streak()
            self._write_record(run, p, c)
            self.pool.answered(ep, c.completion_tokens, time.time())
        finally:
            ep.in_flight -= 1
            run.in_flight.discard(p.id)

    def _permanent(self, run: DatasetRun, p: Prompt, e: PermanentError) -> None:
        """A prompt's own fault goes to its errors file. The job's fault (a model the server does not
        serve, credentials; or one message for many prompts in a row) fails the job at once and files
        nothing: 56,000 prompts moved to errors by one typo would each have to be asked again anyway."""
        if (
            e.job_fault or self.fatal
        ):  # after a fault, answers still in flight are no prompt's fault
            run.requeue(p, time.time())  # unfiled, and never lost
            self._job_fault(str(e))
            return
        run.failed.add(p.id)  # not asked again in this run, filed once the streak ends
        streak = self._streak
        if streak and streak[0][2] != str(e):
            self._end_streak()
        streak.append((run, p, str(e), run.attempts.get(p.id, 0) + 1))
        if len(streak) >= JOB_FAULT_STREAK:
            for r, q, _, _ in streak:
                r.failed.discard(q.id)
            streak.clear()
            self._job_fault(f"{e} (the same answer for {JOB_FAULT_STREAK} prompts in a row)")

    def _job_fault(self, why: str) -> None:
        if not self.fatal:
            self.fatal = (
                f"the server refuses the job, not a prompt: {why}; nothing was filed as an error "
                "(check job.engine.model against the server's GET /v1/models, and api_key_env)"
            )

    def _end_streak(self) -> None:
        """Permanent errors held back while they might have been the job's fault: file them."""
        for run, p, why, attempts in self._streak:
            self._write_error(run, p, why, attempts)
        self._streak.clear()

    def _write_record(self, run: DatasetRun, p: Prompt, c) -> None:
        assistant = {"role": "assistant", "content": c.content}
        if c.reasoning_content is not None:
            assistant["reasoning_content"] = c.reasoning_content
        rec = {
            "id": p.id,
            "dataset": run.spec.name,
            "index": p.index,
            "finish_reason": c.finish_reason,
            "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens},
            "conversations": list(p.messages) + [assistant],
            "model": c.model,
            "created": int(time.time()),
        }
        if c.token_ids is not None:  # extra_body.return_token_ids: keep the exact tokens
            rec["prompt_token_ids"] = c.prompt_token_ids
            rec["token_ids"] = c.token_ids
        line = encode_record(rec)

        def write() -> None:
            run.out.append(line, p.id, c.completion_tokens)
            run.held.discard(p.id)
            run.record_done(p, c.completion_tokens)
            now = time.time()
            run.events.append((now, c.completion_tokens))
            self.bytes_events.append((now, len(line)))
            self.last_completion = now
            if c.finish_reason == "length":
                run.finish_length += 1
            if not c.content.strip():
                run.empty += 1

        run.held.add(p.id)
        self._write_or_hold(write)

    def _write_error(self, run: DatasetRun, p: Prompt, reason: str, attempts: int) -> None:
        rec = {
            "id": p.id,
            "dataset": run.spec.name,
            "index": p.index,
            "error": reason,
            "attempts": attempts,
            "time": int(time.time()),
        }
        line = (json.dumps(rec, ensure_ascii=False) + "\n").encode()

        def write() -> None:
            run.err.append(line)
            run.errors += 1

        self.log(f"{run.spec.name} {p.id}: error: {reason}")
        self._write_or_hold(write)

    def _write_or_hold(self, write) -> None:
        """Write now; or, on a full disk (or with earlier lines still waiting), keep it, in order."""
        if not self.unwritten:
            try:
                write()
                return
            except DiskFull as e:
                self._disk_full(str(e))
        self.unwritten.append(write)

    def _disk_full(self, why: str) -> None:
        if self.disk_full:
            return
        self.disk_full = True
        self.log(
            f"disk full: {why}; no line torn, answers wait in memory, no new requests until there is "
            "space (writes retried every 3s)"
        )
        self.notifier.send(
            "disk_full", self.notify_message(f"disk full ({why}): answers wait, no new requests")
        )

    def _flush_unwritten(self) -> None:
        while self.unwritten:
            try:
                self.unwritten[0]()
            except DiskFull:
                return
            self.unwritten.pop(0)
        if self.disk_full:
            self.disk_full = False
            self.log("disk has space again: the held answers are written; carrying on")

    async def _window(self, engine) -> None:
        """Keep `concurrency` requests in flight on every reachable server: refill a slot the moment one
        frees (a done-callback wakes us; no O(window) asyncio.wait per completion)."""
        tasks: set[asyncio.Task] = set()
        self._tasks = tasks
        wake = asyncio.Event()
        crashed: list[BaseException] = []

        def done(t: asyncio.Task) -> None:
            tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                crashed.append(t.exception())
            wake.set()

        while True:
            now = time.time()
            while True:
                ep = self.pool.pick()
                if ep is None:
                    break
                nxt = self.next_prompt(now)
                if nxt is None:
                    break
                run, p = nxt
                run.in_flight.add(p.id)
                ep.in_flight += 1
                t = asyncio.ensure_future(self._process(engine, ep, run, p))
                tasks.add(t)
                t.add_done_callback(done)
            self.in_flight_total = len(tasks)
            if crashed:
                raise crashed[0]
            down = self.pool.all_down_since()
            if down is not None and now - down > self.down_deadline and not self.fatal:
                what = (
                    "engine unreachable"
                    if len(self.pool.endpoints) == 1
                    else "every engine server unreachable"
                )
                self.fatal = f"{what} for {now - down:.0f}s: {self.engine_error}"
            if self.fatal or (not tasks and not self.has_work()):
                return
            wake.clear()
            try:
                # also: backoffs due, servers back, stop, caps
                await asyncio.wait_for(wake.wait(), timeout=0.25)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ housekeeping

    def _check_control(self) -> None:
        try:
            mtime = self.paths.control.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._control_mtime:
            return
        self._control_mtime = mtime
        ctl = procinfo.read_json(self.paths.control)
        if not ctl or int(ctl.get("seq", 0)) <= self.control_seq:
            return
        if ctl.get("token") not in (None, self.token):
            return  # meant for another runner
        self.control_seq = int(ctl["seq"])
        if ctl.get("grace") is not None:
            # `stop --grace S` says how long in-flight work gets
            self.grace = max(0.0, float(ctl["grace"]))
        if ctl.get("drain"):
            self.draining = True
            self.log(
                f"control {self.control_seq}: drain: no new requests; finishing {self.in_flight_total} in flight"
            )
            return
        if "caps" in ctl:
            try:
                caps = Caps.from_dict(ctl["caps"])
                unknown = [
                    n for n in (caps.datasets or []) + list(caps.caps) if n not in self.job.names()
                ]
                if unknown:
                    raise BadInput(f"unknown dataset {', '.join(unknown)}")
                self.apply_caps(caps)
                self.control_error = None
                self.log(f"control {self.control_seq}: caps now " + self.caps_line())
            except (BadInput, OSError, ValueError) as e:
                self.control_error = str(e)
                self.log(f"control {self.control_seq}: refused: {e}")
        self.write_status()  # the caller waits for control_seq: answer now, not at the next tick

    def caps_line(self) -> str:
        return ", ".join(f"{n}={r.target_n}" for n, r in self.runs.items())

    async def _housekeeping(self) -> None:
        tick = 0
        while True:
            self._check_control()  # a stat() every 0.25 s: a re-cap lands fast
            if tick % 10 == 0:  # a deploy may have replaced a prompt file: say so, reload on re-cap
                for run in self.runs.values():
                    run.prompts_changed = run.prompts.changed_on_disk()
            if tick % 4 == 0:
                for run in self.runs.values():
                    run.out.sync()
                    run.err.sync()
                self.write_status()
                self._alert()
            if tick % 12 == 0 and self.unwritten:
                self._flush_unwritten()
            if tick % 240 == 0 and self.state == RUNNING:
                self.history.record(self.status())
            tick += 1
            await asyncio.sleep(0.25)

    async def _telemetry(self, engine) -> None:
        """The servers' own view (/metrics) and the GPUs' (nvidia-smi) every metrics_interval seconds,
        off the request path: a slow answer delays the next sample, never a request."""
        from ..common import metrics, nvsmi

        last: dict[str, tuple[float, dict]] = {}
        while True:
            for e in self.pool.endpoints:
                text = await engine.metrics(e.url)
                if text is None:
                    e.metrics = None
                    continue
                snap, now = metrics.snapshot(text), time.monotonic()
                prev_t, prev = last.get(e.url, (None, {}))
                rate = new_preempt = None
                if prev_t is not None and None not in (
                    snap["generation_tokens"],
                    prev.get("generation_tokens"),
                ):
                    delta = max(0.0, snap["generation_tokens"] - prev["generation_tokens"])
                    rate = round(delta / (now - prev_t), 1)
                if None not in (snap["preemptions"], prev.get("preemptions")):
                    new_preempt = max(0, int(snap["preemptions"] - prev["preemptions"]))
                e.metrics = {
                    "running": snap["running"],
                    "waiting": snap["waiting"],
                    "kv_cache": snap["kv_cache"],
                    "generation_tokens_per_s": rate,
                    "preemptions": snap["preemptions"],
                    "new_preemptions": new_preempt,  # since the sample before
                    # samples in a row with nothing waiting and KV cache to spare: one is chance, three a pattern
                    "room_samples": (
                        ((e.metrics or {}).get("room_samples", 0) + 1)
                        if snap["waiting"] == 0
                        and snap["kv_cache"] is not None
                        and snap["kv_cache"] < 0.8
                        else 0
                    ),
                }
                last[e.url] = (now, snap)
            self.gpus = await asyncio.to_thread(nvsmi.gpus)
            await asyncio.sleep(self.metrics_interval)

    def notify_message(self, what: str) -> str:
        """One line: where, what happened, done/target, tokens, ETA."""
        import platform

        st = self.status()
        done = sum(d.done for d in st.datasets.values())
        target = sum(d.target for d in st.datasets.values())
        eta = f"{st.eta_s // 3600}h{st.eta_s % 3600 // 60:02d}m" if st.eta_s else "-"
        return (
            f"{platform.node()}:{self.paths.root}: {what}; done {done:,}/{target:,}, "
            f"{st.completion_tokens:,} tokens, ETA {eta}"
        )

    def _alert(self) -> None:
        """stalled and engine_down: once each time they begin (engine_up when a server answers again)."""
        now = time.time()
        idle = now - self.last_completion
        stalled = self.state == RUNNING and self.in_flight_total > 0 and idle > self.stall_after
        if stalled and "stalled" not in self._alerts:
            self._alerts.add("stalled")
            self.log(f"stalled: nothing finished for {idle:.0f}s")
            self.notifier.send(
                "stalled", self.notify_message(f"stalled: no answer finished for {idle:.0f}s")
            )
        elif not stalled:
            self._alerts.discard("stalled")
        down = self.pool.all_down_since() if self.pool else None
        # a server restart is not worth a message: every server silent for a while is
        if down is not None and now - down >= min(60.0, self.down_deadline / 2):
            if "engine_down" not in self._alerts:
                self._alerts.add("engine_down")
                what = (
                    f"engine down: no server answers for {now - down:.0f}s ({self.engine_error}); "
                    f"the job fails after {self.down_deadline:g}s"
                )
                self.notifier.send("engine_down", self.notify_message(what))
        elif down is None and "engine_down" in self._alerts:
            self._alerts.discard("engine_down")
            self.notifier.send(
                "engine_up", self.notify_message("engine up: a server answers again")
            )

    def status(self) -> JobStatus:
        now = time.time()
        window = max(1.0, min(RATE_WINDOW, now - self.started_at))
        total_tok_rate = total_sample_rate = 0.0
        datasets: dict[str, DatasetStatus] = {}
        cum: dict[str, float] = {}
        remaining_tokens_before = 0.0
        for spec in self.job.datasets:
            run = self.runs.get(spec.name)
            if run is None:
                continue
            while run.events and run.events[0][0] < now - RATE_WINDOW:
                run.events.popleft()
            tok_rate = sum(t for _, t in run.events) / window
            sample_rate = len(run.events) / window
            total_tok_rate += tok_rate
            total_sample_rate += sample_rate
            mean = run.completion_tokens / len(run.done) if run.done else spec.est_tokens
            remaining = max(0, run.target_n - run.done_in_target)
            rem_tok = remaining * mean
            if run.budget is not None:
                rem_tok = min(rem_tok, max(0, run.budget - run.completion_tokens))
            state = run.state()
            if state == COMPLETE:
                rem_tok = 0
            remaining_tokens_before += rem_tok
            cum[spec.name] = remaining_tokens_before
            datasets[spec.name] = DatasetStatus(
                state=state,
                done=run.done_in_target,
                target=run.target_n,
                records=len(run.done),
                prompts=len(run.prompts),
                completion_tokens=run.completion_tokens,
                mean_tokens=round(mean, 1),
                errors=run.errors,
                failed_this_run=len(run.failed),
                in_flight=len(run.in_flight),
                new_records=run.new_records,
                finish_length=run.finish_length,
                empty=run.empty,
                tokens_per_s=round(tok_rate, 1),
                samples_per_s=round(sample_rate, 3),
                budget=run.budget,
                budget_reached=run.budget_reached(),
                remaining_tokens=int(rem_tok),
                prompts_file=dict(run.prompts.identity, path=spec.prompts),
                prompts_changed=run.prompts_changed,
            )
        for name, d in datasets.items():
            if d.state == COMPLETE:
                d.eta_s = 0
            elif total_tok_rate > 0:
                # datasets run in job order, so ETAs accumulate
                d.eta_s = int(cum[name] / total_tok_rate)
        stalled = (
            self.state == RUNNING
            and self.in_flight_total > 0
            and now - self.last_completion > self.stall_after
        )
        endpoints = (
            [e.status(now, self.started_at) for e in self.pool.endpoints] if self.pool else []
        )
        return JobStatus(
            state=self.state,
            message=self.message,
            pid=os.getpid(),
            token=self.token,
            started_at=self.started_at,
            updated_at=now,
            release=str(release_dir()),
            root=str(self.paths.root),
            caps=self.caps.to_dict(),
            control_seq=self.control_seq,
            control_error=self.control_error,
            reloaded=self.reloaded,
            draining=self.draining,
            abandoned=self.abandoned,
            engine=EngineStatus(
                kind=self.engine_cfg.get("kind", "openai"),
                model=self.model_name,
                base_urls=[e.url for e in self.pool.endpoints] if self.pool else [],
                reachable=self.pool is None or self.pool.any_reachable(),
                down_since=self.pool.all_down_since() if self.pool else None,
                last_error=self.engine_error,
            ),
            endpoints=endpoints,
            concurrency=self.pool.capacity if self.pool else self.concurrency,
            in_flight=self.in_flight_total,
            tokens_per_s=round(total_tok_rate, 1),
            samples_per_s=round(total_sample_rate, 3),
            completion_tokens=sum(d.completion_tokens for d in datasets.values()),
            errors=sum(d.errors for d in datasets.values()),
            retries=self.retries,
            eta_s=int(remaining_tokens_before / total_tok_rate) if total_tok_rate > 0 else None,
            stalled=stalled,
            last_completion_at=self.last_completion,
            datasets=datasets,
            gpus=self.gpus,
            disk=self._disk(now),
            notified=list(self.notifier.sent),
        )

    def _disk(self, now: float) -> dict:
        d = disk_usage(self.paths.outputs)
        while self.bytes_events and self.bytes_events[0][0] < now - RATE_WINDOW:
            self.bytes_events.popleft()
        written = sum(b for _, b in self.bytes_events)
        rate = written / max(1.0, min(RATE_WINDOW, now - self.started_at))
        free = d["free_bytes"]
        hours = round(free / rate / 3600, 1) if rate > 0 and free is not None else None
        return dict(d, full=self.disk_full, held=len(self.unwritten), hours_left=hours)

    def write_status(self) -> None:
        try:
            write_json_atomic(self.paths.status, self.status().to_dict())
        except OSError as e:
            self.log(f"cannot write {self.paths.status.name}: {e}")

    # ------------------------------------------------------------------ main

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        stop_event = asyncio.Event()

        def on_signal(signame):
            self._check_control()  # a stop writes its grace period there just before the signal
            if self.stopping:
                self.log(f"{signame} again: stopping now")
                self.grace = 0
            self.stopping = True
            stop_event.set()
            self.log(
                f"{signame}: no new requests; {self.in_flight_total} in flight get {self.grace:g}s to finish"
            )

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig.name)
        house = asyncio.ensure_future(self._housekeeping())
        code = EXIT_OK
        try:
            async with make_engine(self.job) as engine:
                self.pool = Pool(engine.base_urls, self.concurrency, self.retry_base, self.log)
                prober = asyncio.ensure_future(self.pool.probe_forever(engine.probe))
                telemetry = None
                if self.metrics_interval > 0:
                    telemetry = asyncio.ensure_future(self._telemetry(engine))
                self.history.start(time.time(), os.getpid())
                self.state = RUNNING
                self.write_status()
                window = asyncio.ensure_future(self._window(engine))
                stopper = asyncio.ensure_future(stop_event.wait())
                await asyncio.wait({window, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if not window.done():
                    # stopping: the window dispatches nothing more; in-flight requests get the grace period
                    deadline = time.monotonic() + self.grace
                    while not window.done() and time.monotonic() < deadline and self.grace > 0:
                        await asyncio.wait({window}, timeout=0.2)
                    if not window.done():
                        lost = self.abandoned = len(self._tasks)
                        for t in list(self._tasks):
                            t.cancel()
                        window.cancel()
                        await asyncio.gather(window, *self._tasks, return_exceptions=True)
                        self.log(
                            f"grace period over: {lost} in-flight requests abandoned (they are redone on resume)"
                        )
                stopper.cancel()
                prober.cancel()
                if telemetry is not None:
                    telemetry.cancel()
                if window.done() and not window.cancelled() and window.exception():
                    raise window.exception()
            self._end_streak()
            if self.fatal:
                self.state, self.message, code = FAILED, self.fatal, EXIT_FAILED
                self.log(f"failed: {self.fatal}")
            elif self.stopping or self.draining:
                self.state, self.message = (
                    STOPPED,
                    "stopped by signal" if self.stopping else "drained",
                )
                self.log(f"stopped: {self.summary()}")
            else:
                self.state = FINISHED
                errors = sum(len(r.failed) for r in self.runs.values())
                self.message = (
                    f"{errors} prompts failed permanently: see *.errors.jsonl; a restart retries them"
                    if errors
                    else ""
                )
                self.log(f"finished: {self.summary()}" + (f"; {self.message}" if errors else ""))
        finally:
            house.cancel()
            for run in self.runs.values():
                run.out.close()
                run.err.close()
                run.prompts.close()
        return code

    def summary(self) -> str:
        return ", ".join(f"{n} {r.done_in_target}/{r.target_n}" for n, r in self.runs.items())

    def run(self) -> int:
        self.log(
            f"runner start pid {os.getpid()} release {release_dir()} engine "
            f"{self.engine_cfg.get('kind')} ({self.model_name}) concurrency {self.concurrency}"
        )
        if self.engine_cfg.get("kind") == "simulate":
            self.log(
                'engine is `simulate`: a built-in stand-in, no model is called (records say model "simulated")'
            )
        self.log("caps: " + self.caps_line())
        for name, run in self.runs.items():
            state = (
                "already complete"
                if run.state() == COMPLETE
                else f"{run.target_n - run.done_in_target} to do"
            )
            self.log(f"{name}: {run.done_in_target}/{run.target_n} done, {state}")
        try:
            code = asyncio.run(self._main())
        except Exception as e:  # a real bug: keep the traceback in the log, say so in status
            import traceback

            self.log("crashed:\n" + traceback.format_exc())
            self.state, self.message = FAILED, f"runner crashed: {type(e).__name__}: {e}"
            code = EXIT_FAILED
        if self.unwritten:
            self.log(
                f"{len(self.unwritten)} answers still waiting for disk space are dropped: redone on resume"
            )
        if self.state == FINISHED:
            self.notifier.send("finished", self.notify_message("finished"))
        elif self.state == FAILED:
            self.notifier.send("failed", self.notify_message(f"failed: {self.message}"))
        self.write_status()
        self.notifier.wait(
            5.0
        )  # a moment for the last message to go out; a hanging command runs on alone
        return code


def error_ids(path: Path) -> set[str]:
    ids = set()
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    ids.add(str(json.loads(line)["id"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return ids


def write_pidfile(paths: Paths, token: str, argv: list[str]) -> None:
    pid = os.getpid()
    write_json_atomic(
        paths.pidfile,
        {
            "pid": pid,
            "pgid": os.getpgid(0),
            "sid": os.getsid(0),
            "start_time": procinfo.start_time(pid),
            "token": token,
            "release": str(release_dir()),
            "root": str(paths.root),
            "argv": argv,
            "started_at": time.time(),
        },
    )


def main(
    paths: Paths, job_path: Path, caps: Caps, *, grace: float, force: bool, argv: list[str]
) -> int:
    echo = sys.stderr.isatty()
    try:
        lock_fd = acquire_lock(paths)
    except LockHeld as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    try:
        job = Job.load(job_path)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read job spec {job_path}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    runner = Runner(paths, job, caps, grace=grace, force=force, echo=echo)
    os.environ[JOB_TOKEN_ENV] = runner.token  # children (none today) inherit it, so stop can find them
    write_pidfile(paths, runner.token, argv)
    runner.write_status()  # `starting`, with this runner's pid and token
    try:
        runner.prepare()
    except BadInput as e:
        runner.state, runner.message = FAILED, str(e)
        runner.log(f"refused: {e}")
        runner.write_status()
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code = runner.run()
    os.close(lock_fd)
    return code
