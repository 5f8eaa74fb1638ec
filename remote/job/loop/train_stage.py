"""The train stage: a draft trained on the job's own hidden states by speculators' offline EAGLE-3
trainer, run by the runner as a child process of its own Python (a venv the host installs, never the
server's), and supervised: a trainer that dies is started again and resumes from its last
checkpoint (the identical command resumes), a trainer that fails twice with the same error is given
up with that error's line, a stop ends it cleanly (SIGTERM; the next start resumes from its last
checkpoint). Its end is the
best checkpoint as vLLM serves it (`server.draft.model: trained`). The job's server is stopped while
it runs (its entry in the stage table says so): the trainer holds the GPUs."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import functools
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

from ...common import machine, procinfo
from ...common.caps import Caps
from ...common.codec import append_line, read_json, write_json
from ...common.jobspec import release_dir, train_datasets, train_refusal
from ...common.machine import default_layers
from ...common.records import TrainStep
from ...common.state import Supervise
from ...common.status import DatasetState, DatasetStatus, EngineStatus, TrainStatus
from ...common.wire import HostFault
from ..store.datasets import BadInput
from ..train import checkpoints, command, epoch_steps, progress
from ..train import prepare as rows
from . import stage
from .asking import pause

LOOK_S = 0.5  # the trainer's log read this often
BACKOFF_S, BACKOFF_MAX_S = 5.0, 300.0  # before a trainer that died is started again; doubles
RESTARTS = 5  # trainers that died one after the other with no step between: given up
OLD_TRAINER_S = 600.0  # a trainer of a runner killed before: waited for (it saves) this long
PR_SET_PDEATHSIG = 1
try:  # looked up here: the child between fork and exec calls nothing that may take a lock
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: the next runner waits for an old trainer instead
    _PRCTL = None


def _dies_with_runner(parent: int) -> None:
    """In the trainer's child before exec: SIGTERM when the runner dies (a kill -9 too), so it
    ends rather than train on beside the next runner's trainer; a runner already gone (it died
    between the fork and here) ends it at once."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


class TrainStage(stage.Stage):
    def __init__(self, runner, caps: Caps, force: bool):
        """`force`: train anew on the rows as they are now, whatever the training under way began
        with (its folders stay beside, never deleted)."""
        super().__init__(runner)
        self.caps, self.force = caps, force
        self.spec = self.job.trainer
        self.data = self.save = self.paths.train  # the digest's own folders, once it is known
        self.status_now = TrainStatus(epochs=self.spec.epochs)
        self.progress = progress.TrainProgress()
        self.proc: asyncio.subprocess.Process | None = None
        self.datasets: dict[str, int] = {}  # rows trained on, per dataset
        self.failures: list[str] = []  # the trainers' ends since the last step, numbers aside
        self.steps: list[int] = []  # each epoch's steps, known before it trains
        self.step_s: collections.deque = collections.deque(maxlen=100)  # recent steps' seconds
        self.last_step_at: float | None = None  # this trainer's last step (None: none yet)
        self.hung: str | None = None  # why the runner killed the trainer, where it did
        self.clock = time.time
        self.read_to = 0  # how far trainer.log is read
        self.ratio = 0.9  # the rows' training part, as prepare made them
        self.metrics = (
            self.paths.train / "metrics.jsonl"
        )  # this training's, once its rows are named
        self.term_due = False  # a stop came while a checkpoint was written: told once it is
        self.keeping: asyncio.Future | None = None  # the copy of the last whole checkpoint

    # ------------------------------------------------------------------ before it runs

    def prepare(self) -> None:
        if refused := train_refusal(self.paths, self.job, self.caps):
            raise BadInput(refused)
        self.datasets = dict.fromkeys(train_datasets(self.paths, self.job, self.caps), 0)
        self.server = self._server()
        self.gpus = self.spec.gpus or len(machine.gpus() or ()) or 1  # one process a GPU
        try:
            self.layers = self._layers()
            self._argv("python")  # its settings checked before the trainer starts
        except ValueError as e:
            raise BadInput(f"job.train: {e}") from None
        except HostFault as e:  # no layers said, and the model's config.json not on the host
            raise BadInput(
                "job.train.target_layers: not said, and the layers the hidden states were made "
                f"with are not known here ({e.fault.message}): set it to the layers the "
                "hidden-states stage kept but the last"
            ) from None

    def _server(self):
        """hosts.yaml's server as the host was last given it (the target the hidden states are
        of), None where the job's server is not deploytool's."""
        data = Supervise.read(self.paths.supervise)
        return data.server.base if data is not None else None

    def _layers(self) -> list[int]:
        """The target's layers the draft reads: job.train.target_layers, else the layers the
        hidden-states stage kept but the last (the target's own last hidden state)."""
        if self.spec.target_layers:
            return list(self.spec.target_layers)
        kept = (self.server.hidden_states.get("layers") if self.server else None) or (
            default_layers(self._verifier())
        )
        return command.target_layer_ids(list(kept))

    def _verifier(self) -> str:
        """The target model, as the server loads it: a folder of remote_dir's (where the server
        starts) made whole, since the trainer runs elsewhere."""
        model = self.server.model if self.server is not None else self.job.engine.model
        here = self.paths.root / Path(model).expanduser()
        return str(here) if not Path(model).is_absolute() and here.exists() else model

    def recap(self, caps: Caps) -> None:
        raise ValueError("the train stage trains on the rows it was started with: restart it")

    def start_lines(self) -> list[str]:
        return [
            "caps: " + self.caps.line(),
            f"train: {self.spec.epochs} epoch{'s' * (self.spec.epochs != 1)} of "
            f"{', '.join(self.datasets)}'s rows with "
            f"{self.spec.trainer if not self.spec.python else self.spec.python}, target layers "
            f"{self.layers}",
        ]

    def in_flight(self) -> int:
        return 1 if self.proc is not None and self.proc.returncode is None else 0

    # ------------------------------------------------------------------ while it runs

    @contextlib.asynccontextmanager
    async def session(self):
        async with self.watching():  # the GPUs it trains on
            yield self._work()

    async def _work(self) -> None:
        python = await self._python()
        if python is None or self.fatal or self.stop.asked:
            return
        if await self._logged([python, "-c", "import speculators.train, datasets"]) != 0:
            if not self.stop.asked:
                self.fatal = (
                    f"{python} cannot import speculators' trainer and datasets "
                    "(logs/trainer.log): install them there, or leave job.train.python out and "
                    "the host installs job.train.trainer into a venv of its own"
                )
            return
        if not await self._rows(python):
            return
        wait = BACKOFF_S
        while not self.stop.asked and self.fatal is None:
            if checkpoints.done(self.save, self.spec.epochs):
                self._serve_best()
                return
            await self._old_trainer_gone()
            if self.stop.asked:
                break
            started, steps = time.time(), self.progress.steps_done
            code, why = await self._train(python)
            if self.stop.asked or checkpoints.done(self.save, self.spec.epochs):
                continue
            if self._given_up(code, why, self.progress.steps_done != steps):
                return
            if time.time() - started > BACKOFF_MAX_S:  # it ran a while: a fresh death
                wait = BACKOFF_S
            what = (
                f"the trainer ended ({why}): started again in {wait:g}s, from its last checkpoint"
            )
            self.log(f"train: {what}")
            self.runner.notifier.send("trainer_restarted", self.runner.notify_message(what))
            self.status_now.restarts += 1
            await pause(self, wait)
            wait = min(2 * wait, BACKOFF_MAX_S)

    def _given_up(self, code: int | None, why: str, stepped: bool) -> bool:
        """A trainer that failed as it failed before (its line, numbers aside) is given up:
        starting it again would fail again. A signal's death is no error of its own, but
        RESTARTS deaths with no step between are given up too (`stepped`: this one made one)."""
        shape = re.sub(r"\d+(\.\d+)?", "N", why)
        same = code is not None and code >= 0 and bool(self.failures) and self.failures[-1] == shape
        self.failures = [shape] if stepped else [*self.failures, shape]
        if same:
            self.fatal = (
                f"the trainer failed twice the same way: {why} (logs/trainer.log); fix it, then "
                "`invoke restart --stage train` resumes from the last checkpoint"
            )
        elif len(self.failures) >= RESTARTS:
            self.fatal = (
                f"the trainer died {RESTARTS} times with no step between, last: {why} "
                "(logs/trainer.log)"
            )
        return self.fatal is not None

    async def _python(self) -> str | None:
        """The trainer's Python: job.train.python, else the venv of job.train.trainer, installed
        once per requirement (a venv half made by a kill is made again)."""
        if self.spec.python:
            found = shutil.which(self.spec.python)
            if found is None:
                self.fatal = f"job.train.python {self.spec.python}: not found on this host"
            return found
        venv = self.paths.trainer_venvs / command.venv_name(self.spec.trainer)
        python = venv / "bin" / "python"
        if (venv / ".installed").is_file():
            return str(python)
        self.status_now.phase = "installing the trainer"
        part = venv.with_name(venv.name + ".part")
        shutil.rmtree(part, ignore_errors=True)  # ours: a venv a kill cut off
        for argv in (
            [sys.executable, "-m", "venv", str(part)],
            [str(part / "bin" / "python"), "-m", "pip", "install", self.spec.trainer],
        ):
            code = await self._logged(argv)
            if code != 0 and self.stop.asked:  # a stop during the install: nothing failed
                return None
            if code != 0:
                self.fatal = (
                    f"installing {self.spec.trainer} failed (exit {code}; logs/trainer.log): set "
                    "job.train.python to a Python that has it, or fix the host's pip"
                )
                return None
        (part / ".installed").write_text(self.spec.trainer + "\n")
        shutil.rmtree(venv, ignore_errors=True)
        part.rename(venv)  # `python -m pip` and the interpreter's link hold no path of the folder
        return str(python)

    async def _logged(self, argv: list[str], env: dict | None = None) -> int | None:
        """`argv` run to its end, its output in logs/trainer.log, in a session of its own (the
        runner's stop tells it, never a signal to the runner's group in the middle of a save);
        it carries the job's token, so a stop finds it even where its runner is gone."""
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        append_line(self.paths.trainer_log, f"==== {' '.join(argv)}\n".encode())
        self.made_at = self.clock()  # silence is timed from its start
        with open(self.paths.trainer_log, "ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=env or self._env(),
                cwd=str(release_dir()),
                preexec_fn=functools.partial(_dies_with_runner, os.getpid()),
                start_new_session=True,
            )
        try:
            return await self.proc.wait()
        finally:
            self.proc = None

    def _env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(release_dir()), env.get("PYTHONPATH")])
        )
        env.update(COLUMNS="2000", PYTHONUNBUFFERED="1")  # one line per record of its log
        return env

    def _plan(self, out: Path) -> dict:
        """What the training rows are made of, as job.train and the caps say it (prepare's)."""
        weights = self.spec.weights
        return {
            "datasets": [
                {
                    "name": n,
                    "folder": str(self.paths.hidden_states / n),
                    "weight": weights.get(n, 1),
                }
                for n in self.datasets
            ],
            "out": str(out),
            "draft_vocab": self.spec.draft_vocab,
        }

    def _settings(self) -> dict:
        """What a resume must find as its training began: the rows' plan and the draft's shape
        and packing (epochs, the learning rate and the checkpoints' pace may change)."""
        argv = self._argv("python")
        kept = [a for a in argv if a not in (str(self.data), str(self.save))]
        return {"plan": self._plan(self.paths.train), "argv": kept}

    async def _rows(self, python: str) -> bool:
        """The training rows, made once and named by their digest, as its checkpoints are: every
        resume trains on the same rows in the same order (rows freed or made since do not change
        them). Other datasets or weights than the training under way began with are refused;
        --force trains anew on the rows as they are now (the old folders stay beside)."""
        now = read_json(self.paths.train_now)
        if now is not None and now.get("settings") == self._settings() and not self.force:
            digest = now["digest"]
        elif now is not None and not self.force:
            self.fatal = (
                "job.train (its datasets, weights, layers, sequence length or args) or the caps' "
                "--datasets differ from what the training under way began with: `invoke restart "
                f"--stage train --force` trains anew (its checkpoints stay in {self.paths.train})"
            )
            return False
        else:
            digest = await asyncio.to_thread(rows.plan_digest, self._plan(self.paths.train))
        self._name(digest)
        if self.force:
            self._set_aside()
        made = rows.read_manifest(self.data)
        if made is None:
            self.status_now.phase = "making the training rows"
            self.paths.train.mkdir(parents=True, exist_ok=True)
            plan_file = self.paths.train / "plan.json"
            write_json(plan_file, self._plan(self.data))
            code = await self._logged([python, "-m", "remote.job.train.prepare", str(plan_file)])
            made = rows.read_manifest(self.data)
            if made is None:
                if not self.stop.asked:
                    self.fatal = f"making the training rows failed (exit {code}; logs/trainer.log)"
                return False
        self._name(made["digest"])  # the rows as prepare found them
        write_json(self.paths.train_now, {"digest": made["digest"], "settings": self._settings()})
        for d in made.get("datasets", []):
            self.datasets[d["name"]] = int(d.get("used", 0))
        self.status_now.rows = int(made.get("rows", 0))
        self.ratio = float(made.get("train_ratio", 0.9))
        lengths, total, ratio = rows.lengths(self.data), self.spec.total_seq_len, self.ratio
        self.steps = await asyncio.to_thread(
            lambda: [
                epoch_steps.steps_per_epoch(lengths, total, ratio, epoch=e)
                for e in range(self.spec.epochs)
            ]
        )
        return True

    def _name(self, digest: str) -> None:
        """This training's folders and loss curve, named by its rows."""
        named = self.paths.training(digest)
        self.data, self.save, self.metrics = named["data"], named["save"], named["metrics"]

    def _set_aside(self) -> None:
        """--force: a training of these very rows begun before is kept beside, never deleted, and
        this one starts from nothing."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for p in (self.save, self.metrics):
            if p.exists():
                p.rename(p.with_name(f"{p.name}.{stamp}"))
                self.log(f"train: --force: {p.name} kept beside as {p.name}.{stamp}")

    async def _old_trainer_gone(self) -> None:
        """A trainer a runner killed before left (told SIGTERM by its death: it saves, then exits)
        is waited for: never two trainers on one folder."""
        rec = read_json(self.paths.trainer) or {}
        pid, began = rec.get("pid"), rec.get("start_time")
        deadline = time.monotonic() + OLD_TRAINER_S
        while pid and procinfo.start_time(pid) == began and procinfo.alive(pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(OSError):  # its session: every rank of it
                    os.killpg(pid, signal.SIGKILL)
            await asyncio.sleep(LOOK_S)

    async def _train(self, python: str) -> tuple[int | None, str]:
        """One trainer, to its end: (exit code, why it ended, in a line)."""
        self.status_now.phase, self.hung, self.last_step_at = "training", None, None
        self.progress.saving = self.progress.validating = False  # the last one's, cut off
        if self.keeping is not None:  # never a copy of a folder a new trainer writes
            await asyncio.gather(self.keeping, return_exceptions=True)
        state = checkpoints.TrainState.read(self.save)
        if checkpoints.set_aside(self.save, state):  # a save a kill cut off: the one before it
            self.log(
                f"train: {state.folder} was not saved whole ({state.torn}): resumed from the "
                "last whole checkpoint"
            )
        argv = self._argv(python, self.ratio)
        start = self.paths.trainer_log.stat().st_size if self.paths.trainer_log.exists() else 0
        follow = asyncio.ensure_future(self._follow(start))
        run = asyncio.ensure_future(self._logged(argv))
        while self.proc is None and not run.done():
            await asyncio.sleep(0.01)
        if self.proc is not None:
            pid = self.proc.pid
            self.status_now.pid = pid
            write_json(self.paths.trainer, {"pid": pid, "start_time": procinfo.start_time(pid)})
        try:
            code = await run
        finally:
            follow.cancel()
            await asyncio.gather(follow, return_exceptions=True)
            self._read(start)  # its last lines
            self.status_now.pid = None
        if self.hung:
            return code, self.hung
        if code is not None and code < 0:
            return code, f"killed by signal {-code}"
        last = procinfo.why_lines(procinfo.tail_lines(self.paths.trainer_log, 40), 1)
        return code, f"exit {code}" + (
            f": {last[-1].strip()}" if last and code else ", not finished"
        )

    def _argv(self, python: str, ratio: float | None = None) -> list[str]:
        return command.trainer_argv(
            python,
            verifier=self._verifier(),
            data=str(self.data),
            save=str(self.save),
            target_layers=self.layers,
            epochs=self.spec.epochs,
            lr=self.spec.lr,
            total_seq_len=self.spec.total_seq_len,
            draft_layers=self.spec.draft_layers,
            draft_vocab=self.spec.draft_vocab,
            checkpoint_freq=self.spec.checkpoint_freq,
            extra=list(self.spec.args),
            gpus=self.gpus,
            train_ratio=ratio,
        )

    async def _follow(self, start: int) -> None:
        while True:
            self._read(start)
            await asyncio.sleep(LOOK_S)

    def _read(self, start: int) -> None:
        """The trainer's new lines, into its progress (and metrics.jsonl, report's loss curve)."""
        with contextlib.suppress(OSError), open(self.paths.trainer_log, "rb") as f:
            f.seek(max(start, self.read_to))
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                self.read_to = f.tell()
                self.made_at = self.clock()  # a line: not hung
                line = raw.decode(errors="replace")
                done, saved = self.progress.steps_done, self.progress.saved
                fed = self.progress.feed(line)
                if fed and "train/loss=" in line and self.progress.steps_done != done:
                    self._stepped()
                if self.progress.saving or self.progress.validating:
                    self.last_step_at = None  # a save's or a validation's time is no step's
                if self.progress.saved != saved and self.progress.saved:
                    self._keep(Path(self.progress.saved))

    def _keep(self, folder: Path) -> None:
        """A checkpoint said saved, copied aside at once (in a thread: the loop goes on reading):
        the one a save cut off later goes back to."""
        if folder.parent == self.save and folder.name != "interrupted":
            self.keeping = asyncio.ensure_future(
                asyncio.to_thread(checkpoints.keep_whole, self.save, folder)
            )

    def _stepped(self) -> None:
        p, now = self.progress, self.clock()
        if self.last_step_at is not None:  # a step's time: never a restart's wait or load
            self.step_s.append(now - self.last_step_at)
        self.last_step_at = now
        if p.loss is not None:
            step = TrainStep(
                t=now,
                epoch=p.epoch or 0,
                step=p.steps_done,
                loss=p.loss,
                accuracy=p.full_acc,
            )
            append_line(self.metrics, step.line())

    def _serve_best(self) -> None:
        # the lowest validation loss; a run killed while it validated its last epoch may name none
        best = checkpoints.best(self.save) or self.save / str(
            checkpoints.epochs_saved(self.save)[-1]
        )
        self.status_now.phase = "saving the draft"
        try:
            out = checkpoints.served_copy(
                best, self.paths.trained_draft, command.aux_layers(self.layers)
            )
        except (OSError, ValueError) as e:
            self.fatal = f"the trained draft could not be made from {best}: {e}"
            return
        self.status_now.draft, self.status_now.phase = str(out), "done"
        self.log(f"train: the draft is {out} (checkpoint {best.name}): server.draft.model: trained")

    def stopping(self) -> None:
        """The trainer told to end (it resumes from its last checkpoint), once a checkpoint it
        writes is whole: its SIGTERM cuts off whatever runs, a save too."""
        self.term_due = True
        self.tick()

    def tick(self) -> None:
        if self.term_due and not self.progress.saving and self.in_flight():
            self.term_due = False
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        idle = self.clock() - self.made_at
        training = self.status_now.phase == "training" and self.in_flight()
        if training and not self.hung and idle > self.hung_after():
            self.hung = f"hung: it wrote nothing for {idle:.0f}s"
            self.log(f"train: the trainer is {self.hung}: killed")
            with contextlib.suppress(ProcessLookupError):  # a stuck collective ignores SIGTERM
                os.killpg(self.proc.pid, signal.SIGKILL)

    def step_seconds(self) -> float | None:
        """A step's time, over this training's recent steps."""
        return sum(self.step_s) / len(self.step_s) if self.step_s else None

    def stall_after(self) -> float:
        """Only a trainer is timed (pip's install and the rows' making write on, unread), and a
        validation says nothing until it ends: it gets its batches' time on top."""
        if self.status_now.phase != "training":
            return float("inf")
        return super().stall_after() + self._validation_s()

    def hung_after(self) -> float:
        """A trainer silent this long is hung: killed, and started again from its checkpoint."""
        return self.spec.hung_minutes * 60 + self._validation_s()

    def _validation_s(self) -> float:
        """A validation's batches (the held-out tenth, no backward), at a training step's time."""
        step = self.step_seconds()
        if not (self.progress.validating and step and self.steps):
            return 0.0
        epoch = self.steps[min(self.progress.epoch or 0, len(self.steps) - 1)]
        return epoch * (1 - self.ratio) / self.ratio * step

    def stall_line(self, idle: float) -> str:
        return f"the trainer wrote nothing for {idle:.0f}s (logs/trainer.log)"

    async def abandon(self) -> int:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # the grace is over: every process of it
        return 0

    # ------------------------------------------------------------------ what it reports

    def status(self, now: float) -> dict:
        p, t = self.progress, self.status_now
        t.epoch, t.step, t.loss, t.accuracy = p.epoch or 0, p.steps_done, p.loss, list(p.full_acc)
        t.val_loss, t.val_accuracy, t.best_epoch = p.val_loss, list(p.val_full_acc), p.best_epoch
        t.tokens_per_s = p.tokens_per_s or 0.0
        t.steps = sum(self.steps) if self.steps else None
        step = self.step_seconds()  # a dead trainer's wait moves it not
        t.eta_s = int((t.steps - t.step) * step) if t.steps and step else None
        done = t.phase == "done"
        datasets = {
            n: DatasetStatus(
                state=DatasetState.COMPLETE if done else DatasetState.RUNNING,
                done=used if done else 0,
                target=used,
            )
            for n, used in self.datasets.items()
        }
        return dict(
            engine=EngineStatus(kind="trainer", model=self._verifier() if self.datasets else ""),
            datasets=datasets,
            stage=self.caps.stage,
            eta_s=t.eta_s,
            eta_guess=False,  # at the trainer's own steps
            tokens_per_s=t.tokens_per_s,
            train=t,
            gpus=self.telemetry.gpus if self.telemetry else None,
        )

    def summary(self) -> str:
        t = self.status_now
        return f"epoch {min(t.epoch + 1, t.epochs)}/{t.epochs} step {t.step}" + (
            f" → {t.draft}" if t.draft else ""
        )

    def progress_line(self) -> str:
        return "train " + self.summary()

    def finished(self) -> str:
        t = self.status_now
        return f"the draft is {t.draft}: server.draft.model: trained measures it" if t.draft else ""
