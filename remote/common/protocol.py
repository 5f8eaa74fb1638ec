"""The one contract between deploytool and the host (standard library only).

Every host command is a typed request (its flags, each default written once, here) and a typed
answer (answers.py), printed in wire.py's envelope. deploytool sends a request as JSON on stdin
(`python -m remote --request`: no secret on a command line); a person types it as a command line
made from the same type. Both ways, and the answer, are read back strictly (`from_wire`): a field
renamed on one side is an error on the first call, never a default on screen. `REQUESTS` lists
every command; remote/cli.py maps each to its handler.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from .caps import CLEAR, Caps, parse_dataset_list, parse_tokens
from .caps import cap_change as _cap
from .caps import held_out as _held_out
from .caps import samples as _samples
from .caps import selection as _selection
from .caps import stage as _stage
from .caps import token_budget as _budget
from .flags import Request, _nonneg_float, opt
from .jobspec import ServerSpec
from .stages import STAGES, stage_of
from .wire import HostFault

GRACE_S = 30.0  # seconds in-flight requests get after SIGTERM before SIGKILL
DRAIN_TIMEOUT_S = 3600.0
START_WAIT_S = 300.0
GPU_WAIT_S = 120.0

# ------------------------------------------------------------------ the requests


def _grace():
    return opt(
        GRACE_S,
        f"seconds in-flight requests get to finish after SIGTERM before SIGKILL (default {GRACE_S:g})",
        parse=_nonneg_float,
        show=lambda g: f"{g:g}",
    )


def _recover():
    return opt(None, "JSON of hosts.yaml `recover:` (the watcher's settings)", json_arg=True)


def _server_spec(text: str) -> ServerSpec:
    try:
        raw = json.loads(text)
    except ValueError:
        raise ValueError(f"expected the JSON of hosts.yaml `server:`, got {text[:40]!r}") from None
    if not isinstance(raw, dict):
        raise ValueError("expected the JSON object of hosts.yaml `server:`")
    return ServerSpec.from_dict(raw)


def _spec():
    return opt(
        ServerSpec(),
        "JSON of hosts.yaml `server:`",
        parse=_server_spec,
        show=lambda spec: json.dumps(spec.to_dict()),
        metavar="JSON",
    )


def _drain(what: str):
    return opt(False, f"stop dispatching and let in-flight requests finish {what}")


def _drain_timeout():
    return opt(DRAIN_TIMEOUT_S, "seconds a drain may take before SIGTERM", parse=_nonneg_float)


_TARGET_FLAGS = ("max_samples", "cap", "max_tokens", "datasets", "reset_caps")
_CAP_FLAGS = (*_TARGET_FLAGS, "eval_samples", "baseline", "stage")


@dataclass
class RunArgs(Request):
    """The runner's flags, which `run`, `ctl start` and `ctl restart` take. The cap flags are a
    change to the job's kept caps (`applied_to`): a flag not given keeps what the job has."""

    max_samples: int | str | None = opt(
        None,
        "each dataset's target: its first N prompts; `all`: every prompt (not given: the job's "
        "kept value)",
        parse=_samples,
    )
    cap: tuple[tuple[str, int | str], ...] = opt(
        (), "DS=N: DS's own target over --max-samples; DS=all: DS back to --max-samples "
        "(repeatable; other datasets keep theirs)", parse=_cap,
        show=lambda c: f"{c[0]}={c[1]}", metavar="DS=N", repeat=True,
    )  # fmt: skip
    max_tokens: int | str | None = opt(
        None,
        "per dataset, stop dispatching once response tokens reach T (10M, 500k, 2500000); "
        "`none`: no budget",
        parse=_budget,
        show=lambda t: "none" if t == CLEAR else str(t),
        metavar="T",
    )
    datasets: tuple[str, ...] | str | None = opt(
        None, "run only these datasets, comma-separated (B2,B3); `all`: every dataset",
        parse=_selection, show=lambda d: d if isinstance(d, str) else ",".join(d), metavar="B2,B3",
    )  # fmt: skip
    reset_caps: bool = opt(
        False,
        "forget the job's kept caps first: every prompt of every dataset, no token budget, "
        "hosts.yaml's eval-samples (the stage is kept; cap flags given with it apply on top)",
    )
    stage: str | None = opt(
        None,
        "; ".join(f"{s.name}: {s.doing}" for s in STAGES.values())
        + " (not given: the job's kept stage)",
        parse=_stage,
        metavar="STAGE",
    )
    eval_samples: int | str | None = opt(
        None,
        "the draft and baseline stages: each dataset's held-out prompts measured, the first K "
        "after its cap; `all`: hosts.yaml's server.draft.eval_samples (not given: the job's kept "
        "value)",
        parse=_held_out,
        metavar="K",
    )
    baseline: bool = opt(
        False,
        "with --stage draft: then the baseline, the same prompts answered by the server started "
        "again without the draft (the watcher does it once the draft is measured); with --stage "
        "train: then the draft it made measured (server.draft.model: trained), then the baseline",
    )
    grace: float = _grace()
    force: bool = opt(
        False,
        "resume even if model/sampling settings differ from the outputs; the hidden-states stage: "
        "start although the rows left do not fit the free space (it pauses before the disk fills); "
        "the train stage: train anew on rows that changed (the old checkpoints kept beside)",
    )

    def __post_init__(self):
        if self.baseline and not stage_of(self.stage).followed_by:
            raise ValueError(
                "--baseline follows the draft stage (or the train stage, through the draft): "
                "`restart --stage draft --baseline` (the baseline alone: --stage baseline)"
            )

    def changes_caps(self, names=_CAP_FLAGS) -> bool:
        # "not given" by identity: a budget of 0 is a change, though 0 == False
        return any(
            not (v is None or v is False or v == ()) for v in map(self.__getattribute__, names)
        )

    def may_raise(self) -> bool:
        """A target may go up (a stage, or the prompts a measure asks, never change how much)."""
        return self.changes_caps(_TARGET_FLAGS)

    def applied_to(self, kept: Caps) -> Caps:
        """The caps after this change: each flag given changes only what it names."""
        base = Caps() if self.reset_caps else kept

        def given(flag, old):
            return old if flag is None else (None if flag == CLEAR else flag)

        caps = dict(base.caps)
        for name, n in self.cap:
            if n == CLEAR:
                caps.pop(name, None)
            else:
                caps[name] = n
        datasets = given(self.datasets, base.datasets)
        return Caps(
            given(self.max_samples, base.max_samples),
            caps,
            given(self.max_tokens, base.max_tokens),
            list(datasets) if datasets is not None else None,
            self.stage or kept.stage,  # the stage is no cap: --reset-caps keeps it
            given(self.eval_samples, base.eval_samples),
            # a stage typed says whether the baseline follows it; none typed keeps what was
            self.baseline if self.stage else kept.baseline,
        )

    def named_datasets(self) -> list[str]:
        """The datasets these flags name (to check them against the job)."""
        selection = [] if self.datasets in (None, CLEAR) else list(self.datasets)
        return selection + [c[0] for c in self.cap]

    def run_flags(self) -> RunArgs:
        """Only the runner's flags."""
        return RunArgs(**{f.name: getattr(self, f.name) for f in fields(RunArgs)})

    def own_flags(self) -> RunArgs:
        """These flags without the cap change: the runner's own (what a command starts it with and
        the watcher starts it again with; it runs the job's kept caps)."""
        return RunArgs(grace=self.grace, force=self.force)


@dataclass
class RunJob(RunArgs):
    command: ClassVar = ("run",)
    help: ClassVar = (
        "run the job in the foreground (same lock, outputs and status as a managed run)"
    )
    job: Path | None = opt(None, "job spec (default: job.json in this release)")


@dataclass
class CtlStart(RunArgs):
    command: ClassVar = ("ctl", "start")
    answer: ClassVar = "RestartAnswer"
    help: ClassVar = "start the runner detached; wait until it reports running"
    wait: float = opt(START_WAIT_S, "seconds to wait for the runner to report running")
    force_gpu: bool = opt(False, "start even if other processes hold GPU memory")
    recover: dict | None = _recover()


@dataclass
class CtlRestart(CtlStart):
    command: ClassVar = ("ctl", "restart")
    help: ClassVar = "new caps live, or stop the runner and start it again"
    hard: bool = opt(False, "always a real restart, never a live re-cap")
    drain: bool = _drain("before restarting")
    drain_timeout: float = _drain_timeout()
    dry_run: bool = opt(False, "say what would happen, change nothing")
    server: ServerSpec | None = opt(
        None,
        "JSON of hosts.yaml `server:`, where the job's engine is that server: started first where "
        "it is down, started again where it runs for another stage (the host sees it through "
        "alone, the model's load included)",
        parse=_server_spec,
        show=lambda spec: json.dumps(spec.to_dict()),
        metavar="JSON",
    )
    keep_server: bool = opt(
        False, "with --server: never start it (a server down is refused unless --force)"
    )


@dataclass
class CtlSwitch(Request):
    command: ClassVar = ("ctl", "switch")
    help: ClassVar = (
        "carry out the server swap run/switch.json holds, then start the runner (started detached "
        "by `ctl restart` and by the watcher)"
    )


# a stop's runner gets this long past its grace to cut off what is in flight and exit by itself,
# before its process tree is killed (SIGKILL): the host waits it, the views say it
KILL_AFTER_GRACE_S = 3.0


@dataclass
class CtlStop(Request):
    command: ClassVar = ("ctl", "stop")
    answer: ClassVar = "StopAnswer"
    help: ClassVar = "stop the runner: SIGTERM, the grace period, SIGKILL of its tree"
    grace: float = _grace()
    drain: bool = _drain("first")
    drain_timeout: float = _drain_timeout()


@dataclass
class CtlStatus(Request):
    command: ClassVar = ("ctl", "status")
    answer: ClassVar = "JobView"
    help: ClassVar = "the job's status.json, with the runner, strays and supervision looked up"
    again: bool = opt(False, "answer again for each line read on stdin, until it closes")


@dataclass
class CtlPlan(Request):
    command: ClassVar = ("ctl", "plan")
    answer: ClassVar = "HostPlan"
    help: ClassVar = "per-dataset caps that reach a response-token target"
    tokens_per_dataset: int = opt(0, "response-token target per dataset (10M, 500k)",
                                  parse=parse_tokens)  # fmt: skip
    datasets: tuple[str, ...] | None = opt(
        None, "run only these datasets, comma-separated (B2,B3)",
        parse=lambda t: tuple(parse_dataset_list(t)), show=",".join, metavar="B2,B3",
    )  # fmt: skip
    spec: ServerSpec = _spec()  # the model and layers the hidden-states stage would write


@dataclass
class CtlReport(Request):
    command: ClassVar = ("ctl", "report")
    answer: ClassVar = "ReportAnswer"
    help: ClassVar = "what `invoke report` draws, in one pass over the outputs"


@dataclass
class CtlFiles(Request):
    command: ClassVar = ("ctl", "files")
    answer: ClassVar = "FilesAnswer"
    help: ClassVar = "sizes and prefix hashes of data/outputs files, for pull"
    have: dict = opt({}, "JSON {name: local size}", json_arg=True)
    hidden: bool = opt(False, "the hidden-states stage's ledgers instead (<DS>/rows.jsonl)")
    whole: bool = opt(False, "hash every byte of each local copy's length, not its last block")


@dataclass
class CtlFree(Request):
    command: ClassVar = ("ctl", "free")
    answer: ClassVar = "HiddenFreed"
    help: ClassVar = (
        "delete the hidden-states stage's row files whose copy has their sha256; each summed here "
        "first, the row stays counted"
    )
    rows: dict = opt(
        {}, "JSON {dataset: {n: sha256}}: the rows whose copy has that sum", json_arg=True
    )


@dataclass
class CtlKeys(Request):
    command: ClassVar = ("ctl", "keys")
    answer: ClassVar = "KeysStored"
    help: ClassVar = "store the API keys of the job's servers, for the runner's eyes only"
    # deploytool sends every request on stdin: the keys are never on a command line
    keys: dict = opt({}, "JSON {url: key}", json_arg=True)


@dataclass
class ServerStart(Request):
    command: ClassVar = ("server", "start")
    answer: ClassVar = "ServerStarted"
    help: ClassVar = "start the vLLM server detached (readiness: `server check`)"
    spec: ServerSpec = _spec()
    recover: dict | None = _recover()
    stage: str | None = opt(
        None,
        "the stage the server is for: hidden-states adds vLLM's extraction config (not given: the "
        "job's kept stage)",
        parse=_stage,
    )
    dry_run: bool = opt(
        False, "work out the command line it would run (the stage's config), start nothing"
    )


@dataclass
class ServerCheck(Request):
    command: ClassVar = ("server", "check")
    answer: ClassVar = "ServerChecked"
    help: ClassVar = "a look: alive, ready (GET /v1/models), the log's last lines"
    wait_s: float = opt(0.0, "seconds to look again until it answers or dies", parse=_nonneg_float)


@dataclass
class ServerSmoke(Request):
    command: ClassVar = ("server", "smoke")
    answer: ClassVar = "SmokeAnswer"
    help: ClassVar = "one short request, its answer checked for a broken model"
    spec: ServerSpec = _spec()


@dataclass
class ServerStop(Request):
    command: ClassVar = ("server", "stop")
    answer: ClassVar = "ServerStopped"
    help: ClassVar = "stop the server and every engine process it left; wait for GPU memory"
    grace: float = _grace()
    gpu_wait: float = opt(GPU_WAIT_S, "seconds to wait for its GPU memory to be free",
                          parse=_nonneg_float)  # fmt: skip


@dataclass
class ServerStatus(Request):
    command: ClassVar = ("server", "status")
    answer: ClassVar = "ServerState"
    help: ClassVar = "up, ready, model, uptime and the server's own /metrics"
    quick: bool = opt(
        False, "up, ready and its stage only: not its /metrics, whose rate takes a second"
    )


@dataclass
class Watch(Request):
    command: ClassVar = ("watch",)
    help: ClassVar = "the watcher: restarts a dead or wedged server and a dead runner"


REQUESTS: tuple[type[Request], ...] = (
    RunJob, CtlStart, CtlRestart, CtlSwitch, CtlStop, CtlStatus, CtlPlan, CtlReport, CtlFiles, CtlFree, CtlKeys,
    ServerStart, ServerCheck, ServerSmoke, ServerStop, ServerStatus, Watch,
)  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """A command line that is not the contract's is a usage fault, answered like any other."""

    def error(self, message: str):
        raise HostFault("usage", f"{self.prog}: {message}")


BY_COMMAND = {cls.command: cls for cls in REQUESTS}


def _command_parser(cls: type[Request], p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    cls.add_arguments(p)
    p.add_argument("--root", type=Path, help="remote_dir (default: the one this release is in)")
    p.set_defaults(request=cls)
    return p


def parser() -> argparse.ArgumentParser:
    """`python -m remote ...`, made from the request types; an unknown command is a usage fault."""
    top = _Parser(prog="python -m remote", description="deploytool's host side")
    groups: dict[str, argparse._SubParsersAction] = {}
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for cls in REQUESTS:
        *group, name = cls.command
        where = sub
        if group:
            if group[0] not in groups:
                g = sub.add_parser(group[0], help=f"{group[0]} commands (JSON on stdout)")
                groups[group[0]] = g.add_subparsers(dest="sub", required=True, parser_class=_Parser)
            where = groups[group[0]]
        _command_parser(cls, where.add_parser(name, help=cls.help))
    return top


def parse(argv: list[str]) -> tuple[Request, Path | None]:
    """The request a command line asks for, and its --root; HostFault("usage") when it is none.
    Only the asked command's parser is made (`ctl status` is asked every few seconds); the whole
    parser says what is wrong with anything else."""
    for n in (2, 1):
        cls = BY_COMMAND.get(tuple(argv[:n]))
        if cls is not None:
            p = _command_parser(cls, _Parser(prog="python -m remote " + " ".join(cls.command)))
            ns = p.parse_args(argv[n:])
            break
    else:
        ns = parser().parse_args(argv)
    return ns.request.from_args(ns), getattr(ns, "root", None)
