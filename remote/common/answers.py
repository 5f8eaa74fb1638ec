"""ctl's and server's answers (one JSON object on stdout), typed: the host writes these fields,
deploytool reads them back with `from_dict` and renders fields, never string keys. Like status.json,
a reader ignores keys it does not know and fills defaults for missing ones."""

from __future__ import annotations

from dataclasses import dataclass, field

from .status import ServerMetrics, _FromDict, _known


@dataclass
class StopAnswer(_FromDict):
    host: str = ""
    was_running: bool = False
    stopped: list = field(default_factory=list)  # pids signalled
    killed: list = field(default_factory=list)  # pids that needed SIGKILL
    strays: list = field(default_factory=list)  # runners found without a pid file
    lost_in_flight: int = 0  # requests cut off (redone on resume)
    drained: bool = False


@dataclass
class RestartAnswer(_FromDict):
    host: str = ""
    mode: str = "start"  # live (caps applied to the running runner) | restart | start
    dry_run: bool = False
    pid: int | None = None
    token: str | None = None
    release: str | None = None
    state: str | None = None
    caps: dict = field(default_factory=dict)  # dataset -> {done, target, state}
    gpu: dict | None = None  # the GPU check's report
    lost_in_flight: int = 0
    stopped: StopAnswer | None = None
    reloaded: dict = field(default_factory=dict)  # prompt files reloaded live: name -> {from, to}
    running: dict | None = None  # dry run: the runner's pid file record

    @classmethod
    def from_dict(cls, d: dict) -> "RestartAnswer":
        d = _known(cls, d)
        if d.get("stopped") is not None:
            d["stopped"] = StopAnswer.from_dict(d["stopped"])
        return cls(**d)


@dataclass
class LeftoverProcess(_FromDict):
    """A process of a server that died hard, still in its session (vLLM's engine core, workers)."""

    pid: int
    start_time: int | None = None
    what: str = "?"  # its command line as it shows it (setproctitle: VLLM::EngineCore)
    rss_mib: int | None = None
    gpu_mib: int | None = None


def _leftovers(d: dict, key: str) -> None:
    d[key] = [LeftoverProcess.from_dict(p) for p in d.get(key) or []]


@dataclass
class ServerStarted(_FromDict):
    host: str = ""
    already: bool = False  # it was up: nothing started
    pid: int | None = None
    port: int | None = None
    model: str = ""
    argv: list = field(default_factory=list)
    env: dict = field(default_factory=dict)  # secret-looking values masked
    removed: list[LeftoverProcess] = field(default_factory=list)  # a dead server's, removed first
    ready_after_s: float | None = None
    smoke: str | None = None  # the smoke test's answer
    served_model: str | None = None  # the name the smoke test asked for (GET /v1/models)
    headless: bool = False

    @classmethod
    def from_dict(cls, d: dict) -> "ServerStarted":
        d = _known(cls, d)
        _leftovers(d, "removed")
        return cls(**d)


@dataclass
class ServerStopped(_FromDict):
    host: str = ""
    was_running: bool = False
    pid: int | None = None
    killed: list = field(default_factory=list)
    alive: list = field(default_factory=list)  # still alive after everything
    gpu: dict | None = None  # {free, still_held_by}; None: no nvidia-smi
    removed: list[LeftoverProcess] = field(default_factory=list)  # a dead server's leftovers

    @classmethod
    def from_dict(cls, d: dict) -> "ServerStopped":
        d = _known(cls, d)
        _leftovers(d, "removed")
        return cls(**d)


@dataclass
class ServerState(_FromDict):
    host: str = ""
    up: bool = False
    ready: bool = False
    pid: int | None = None
    port: int | None = None
    model: str = ""
    uptime_s: float | None = None
    metrics: ServerMetrics | None = None
    headless: bool = False
    leftovers: list[LeftoverProcess] = field(default_factory=list)  # of a server that died hard
    died: bool = False  # down, and nobody stopped it
    engines_gone: list[LeftoverProcess] = field(default_factory=list)  # its engine processes, dead

    @classmethod
    def from_dict(cls, d: dict) -> "ServerState":
        d = _known(cls, d)
        _leftovers(d, "leftovers")
        _leftovers(d, "engines_gone")
        if d.get("metrics") is not None:
            d["metrics"] = ServerMetrics.from_dict(d["metrics"])
        return cls(**d)


@dataclass
class PlanRow(_FromDict):
    """One dataset of `ctl plan`: the cap that reaches the token target, and what is left to do."""

    prompts: int = 0
    records: int = 0
    mean_tokens: float = 0.0
    source: str = ""  # measured over N records | est_tokens (only N records)
    cap: int = 0
    target: int = 0  # the cap, or every prompt where there are fewer
    done: int = 0
    todo: int = 0
    tokens_todo: int = 0
    tokens_done: int = 0
    eta_s: int | None = None  # filled in locally, from the rate

    @property
    def measured(self) -> bool:
        return self.source.startswith("measured")

    @property
    def fewer_prompts_than_cap(self) -> bool:
        return bool(self.prompts) and self.target < self.cap


@dataclass
class PlanAnswer:
    host: str
    tokens_per_dataset: int
    datasets: dict[str, PlanRow]
    tokens_per_s: float | None = None
    rate_source: str | None = None  # --tokens-per-s | measured (last minute) | None
