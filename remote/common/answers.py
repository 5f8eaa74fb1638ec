"""Every host command's answer, typed. The host builds these (never a plain dict) and prints them in
protocol.py's envelope; deploytool reads them back with protocol.from_wire, strictly, and renders
fields, never string keys. `host` is filled in on the local side."""

from __future__ import annotations

from dataclasses import dataclass, field

from .caps import CapRow, Caps
from .speed import etas
from .stages import EXTRACT, PLAIN, SPECULATE, serving
from .status import DraftCounts, JobStatus, JobView, Reload, ServerMetrics, SwitchView


@dataclass
class WatcherInfo:
    """The host's watcher after a command: running while something is wanted."""

    pid: int
    on_boot: bool = False  # recover.on_boot's unit is installed
    note: str | None = None  # why it is not


@dataclass
class GpuApp:
    """A process that holds GPU memory (nvidia-smi's compute apps)."""

    pid: int
    used_mib: int = 0
    cmd: str = ""  # its command line (for one that is not the server's)


@dataclass
class GpuCheck:
    """The GPU check before a start: who holds GPU memory, and who of them is not the server."""

    checked: bool = False  # False: no nvidia-smi on the host
    note: str | None = None
    apps: list[GpuApp] = field(default_factory=list)
    blocking: list[GpuApp] = field(default_factory=list)  # of them, not the inference server's


@dataclass
class GpuFreed:
    """After a server stop: is its GPU memory free."""

    free: bool = True
    still_held_by: list[GpuApp] = field(default_factory=list)


@dataclass
class StopAnswer:
    host: str = ""
    was_running: bool = False
    stopped: list[int] = field(default_factory=list)  # pids signalled
    killed: list[int] = field(default_factory=list)  # pids that needed SIGKILL
    strays: list[int] = field(default_factory=list)  # runners found without a pid file
    lost_in_flight: int = 0  # requests cut off (redone on resume)
    drained: bool = False
    watcher: WatcherInfo | None = None
    # what it found, where not the runner a command started, running as asked: the last runner's
    # end (none running), one the watcher started again, or one a signal not of ours was stopping
    found: str | None = None


@dataclass
class RestartAnswer:
    """`ctl start` and `ctl restart`."""

    host: str = ""
    # live (caps applied to the running runner) | unchanged (it runs them already) | restart | start
    # | switching (the host starts the server again for the stage, then the runner: `switch`)
    mode: str = "start"
    dry_run: bool = False
    pid: int | None = None
    token: str | None = None
    release: str | None = None
    state: str | None = None
    caps: dict[str, CapRow] = field(default_factory=dict)
    gpu: GpuCheck | None = None
    lost_in_flight: int = 0
    stopped: StopAnswer | None = None
    reloaded: dict[str, Reload] = field(default_factory=dict)  # prompt files reloaded live
    running_pid: int | None = None  # dry run: the runner that would be stopped or re-capped
    kept: Caps = field(default_factory=Caps)  # the job's caps now (a dry run: would be)
    was: Caps = field(default_factory=Caps)  # and before this command
    watcher: WatcherInfo | None = None
    deployed_job: str | None = None  # the sha256 of the job the current release holds
    job_differs: bool = False  # hosts.yaml's job is not that one (deploytool)
    switch: SwitchView | None = None  # the server swap begun (a dry run: the one it would need)
    # live: why the deployed release was not started instead (settings the records were not made
    # with); the running runner, of the release before, took the caps
    held_back: str | None = None
    # --force: the datasets whose records the new runner goes on with other settings than they
    # were made with, and how (jobspec.dataset_changes_text); a dry run's: those it would mix
    forced_mix: str | None = None


@dataclass
class LeftoverProcess:
    """A process of a server that died hard, still in its session (vLLM's engine core, workers)."""

    pid: int
    start_time: int | None = None
    what: str = "?"  # its command line as it shows it (setproctitle: VLLM::EngineCore)
    rss_mib: int | None = None
    gpu_mib: int | None = None


@dataclass
class ServerStarted:
    host: str = ""
    already: bool = False  # it was up (or starting): nothing started
    by: str | None = None  # already: who started it ("user" or "watcher")
    up_s: float | None = None  # already: seconds since it was started
    waited: bool = False  # already, still loading: this start waited for it to be ready
    pid: int | None = None
    port: int | None = None
    model: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)  # secret-looking values masked
    removed: list[LeftoverProcess] = field(default_factory=list)  # a dead server's, removed first
    ready_after_s: float | None = None  # once it answers (its load waited for on the host)
    smoke: str | None = None  # the smoke test's answer
    served_model: str | None = None  # the name the smoke test asked for (GET /v1/models)
    headless: bool = False
    watcher: WatcherInfo | None = None
    switch: SwitchView | None = None  # its load waited for on the host (ready already: None)


@dataclass
class ServerChecked:
    """`server check`: one look at the server's process and GET /v1/models."""

    alive: bool = False
    ready: bool = False
    started: bool = False  # a pid file exists
    pid: int | None = None
    port: int | None = None
    models: list[str] = field(default_factory=list)
    headless: bool = False
    elapsed_s: float = 0.0  # since it was started
    log: list[str] = field(default_factory=list)  # logs/server.log's last lines


@dataclass
class SmokeAnswer:
    answer: str = ""  # the first 200 characters of the model's answer
    model: str = ""  # the name asked for


@dataclass
class ServerStopped:
    host: str = ""
    was_running: bool = False
    pid: int | None = None
    killed: list[int] = field(default_factory=list)
    alive: list = field(default_factory=list)  # still alive after everything
    gpu: GpuFreed | None = None  # None: no nvidia-smi
    removed: list[LeftoverProcess] = field(default_factory=list)  # a dead server's leftovers
    watcher: WatcherInfo | None = None


@dataclass
class ServerState:
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
    extracts: bool = False  # started with vLLM's hidden-states extraction config
    speculative: str | None = None  # its --speculative-config (a draft's, or the extraction's)

    @property
    def drafts(self) -> bool:
        """Started with a draft (a speculative config that is no extraction)."""
        return self.speculative is not None and not self.extracts

    @property
    def serves(self) -> str:
        """The stage its flags were added for: the answers' (or the baseline's) have none."""
        return serving(EXTRACT if self.extracts else SPECULATE if self.drafts else PLAIN)


@dataclass
class ReleasePlan:
    """release.py's `session` first line: what the host has (plain JSON: release.py imports
    nothing of the package; read strictly here)."""

    root: str
    current: str | None
    manifest: dict[str, str]  # path -> sha256 of the current release's files
    releases: list[str]
    prompts: dict[str, str | None]  # prompt file -> sha256 on the host
    running_prompts: dict[str, int]  # prompt files a running runner has open -> its pid
    # datasets with records (or answers in flight) -> the settings their meta file says they were
    # made with
    made_with: dict[str, dict]
    # a draft's copy (data/draft-models/<name>) -> the files of the version it reads from:
    # path -> [size, mtime_ns, sha256]
    drafts: dict[str, dict[str, list]] = field(default_factory=dict)
    # and the whole files of its other versions (a deploy cut off left them, not switched to):
    # path -> a list of [size, mtime_ns, sha256]
    drafts_pending: dict[str, dict[str, list]] = field(default_factory=dict)
    # datasets whose records name their prompts by line number -> the bytes of the file they were
    # made from ({size, sha256}: state.LineIds)
    line_ids: dict[str, dict] = field(default_factory=dict)
    job: dict = field(default_factory=dict)  # the current release's job.json


@dataclass
class ReleaseApplied:
    """release.py's `session` last line, once the new release is in place."""

    current: str
    previous: str | None
    prompts: list[str]
    pruned: list[str]
    applied: bool


@dataclass
class RolledBack:
    current: str
    previous: str | None
    host: str = ""
    # ran: the last release a runner ran from | deployed: the one before (none ran) | named: --to
    why: str = "named"
    previous_ran: bool = False  # a runner ran from the release it left
    job: dict = field(default_factory=dict)  # job.json of the release it went to
    previous_job: dict = field(default_factory=dict)  # and of the one it left
    made_with: dict = field(default_factory=dict)  # what each dataset's records were made with
    # the datasets whose records the release's settings differ from (a restart would be refused)
    settings_differ: dict = field(default_factory=dict)


@dataclass
class PreflightProblem:
    """What the job's engine needs that the host's python cannot import (`preflight`'s detail)."""

    python: str
    engine: str
    missing: dict[str, str]  # module -> why it did not import


@dataclass
class HostProbe:
    """host/preflight.py's one line for `invoke hosts` (sent as source: it writes plain JSON)."""

    node: str
    version: str
    executable: str | None
    missing: dict[str, str]
    model: str | None  # why the job's servers would answer every request with a 404


@dataclass
class FileInfo:
    """One file of data/outputs, for pull: its size, and hashes that tell appended from replaced."""

    size: int = 0
    prefix_sha256: str | None = None  # of the block before the local copy's end
    sha256: str | None = None  # whole (small, rewritten files only)


@dataclass
class FilesAnswer:
    files: dict[str, FileInfo] = field(default_factory=dict)
    caps: Caps | None = None  # the job's kept caps: export leaves out the records beyond them
    # per dataset, the ids of the records beyond the caps as the runner counts them (by the prompt
    # file as it is now); None: a host that does not say (export goes by the records' index)
    beyond: dict[str, list[str]] | None = None


@dataclass
class HiddenFreed:
    """`ctl free`: the row files deleted on the host, per dataset, and those kept with why."""

    freed: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    before: int = 0  # freed by an earlier pull (its unlink finished now where it was cut)
    refused: dict[str, dict] = field(default_factory=dict)  # dataset -> {n: why}


@dataclass
class KeysStored:
    """`ctl keys`: how many servers' keys the runner will send."""

    servers: int = 0


@dataclass
class PlanRow:
    """One dataset of `ctl plan`: the cap that reaches the token target, and what is left to do."""

    prompts: int = 0
    records: int = 0
    mean_tokens: float = 0.0
    source: str = (
        ""  # the per-record estimate used, in words: measured mean of N records | est_tokens (…)
    )
    cap: int = 0
    target: int = 0  # the cap, or every prompt where there are fewer
    done: int = 0
    todo: int = 0
    tokens_todo: int = 0
    tokens_done: int = 0
    selected: bool = True  # False: the kept caps leave it out (--datasets): nothing of it runs
    eta_s: int | None = None  # at the host's rate (`plan_etas`), or at --tokens-per-s

    @property
    def fewer_prompts_than_cap(self) -> bool:
        return bool(self.prompts) and self.target < self.cap


def plan_etas(rows: dict[str, PlanRow], rate: float | None, now: JobStatus | None = None) -> None:
    """Each row's ETA, the way status reckons its own (`speed.etas`): at `rate`, in job order, the
    datasets left out not run. `now`: the job's status while a runner makes answers, at its own
    pace: a row whose target and those before it are the ones the runner runs to is never sooner
    than status says (the longest answer in flight)."""
    run = {n: r for n, r in rows.items() if r.selected}
    floor, same = {}, True
    for name, r in run.items():
        d = now.datasets.get(name) if now else None
        same = same and d is not None and d.target == r.target
        if same and d.eta_s is not None:
            floor[name] = float(d.eta_s)
    reckoned = etas({n: float(r.tokens_todo) for n, r in run.items()}, rate or 0.0, floor)
    for name, r in run.items():
        r.eta_s = 0 if not r.todo else reckoned[name]


@dataclass
class StageBytes:
    """What the hidden-states stage writes at a plan's caps (plan's disk line)."""

    tokens: int = 0  # of the rows: every record's prompt and reply ids
    made: int = 0  # of those, in rows already made
    bytes_per_token: float | None = None
    basis: str = ""  # where bytes_per_token comes from
    free: int | None = None  # bytes free on the job's disk
    sampled: int = 0  # records read that had token ids (0: the stage would have nothing to read)

    @property
    def left(self) -> int | None:
        """Bytes the rows left will take (None: not known)."""
        if self.bytes_per_token is None:
            return None
        return int(max(0, self.tokens - self.made) * self.bytes_per_token)


@dataclass
class HostPlan:
    """`ctl plan`: per dataset, the cap that reaches the target; the rate, where the job runs."""

    datasets: dict[str, PlanRow] = field(default_factory=dict)
    tokens_per_s: float | None = None
    rate_basis: str = ""  # what the rate is: the last minute's, or speed.MEAN_TEXT
    state: str = ""
    stage: StageBytes | None = None
    max_tokens: int | None = None  # the job's kept token budget per dataset (--max-tokens)


@dataclass
class PlanAnswer:
    host: str
    tokens_per_dataset: int
    datasets: dict[str, PlanRow]
    tokens_per_s: float | None = None
    rate_source: str | None = None  # --tokens-per-s | measured (last minute) | None
    stage: StageBytes | None = None
    max_tokens: int | None = None  # the job's kept token budget per dataset (--max-tokens)


@dataclass
class Histogram:
    width: int = 1  # tokens per bin
    counts: list[int] = field(default_factory=list)


@dataclass
class ReportDataset:
    records: int = 0  # in the cap
    beyond: int = 0  # records beyond the cap, kept on disk and counted nowhere else
    tokens: int = 0
    mean: float | None = None
    target: int | None = None
    hist: Histogram = field(default_factory=Histogram)
    finish: dict[str, int] = field(default_factory=dict)  # finish_reason -> records
    errors: int = 0
    last_errors: list[str] = field(default_factory=list)


@dataclass
class ReportStage:
    """The hidden-states stage's rows of one dataset, as its files on the host hold them."""

    rows: int = 0
    target: int | None = None  # rows to make (known while the stage is the job's)
    failed: int = 0  # rows this stage's runner gave up on
    tokens: int = 0  # in the rows: prompt and reply ids
    trained: int = 0  # of them, under the loss mask (the target's own tokens)
    bytes: int = 0  # of every row's file
    freed: int = 0  # rows whose file `pull --hidden-states --free` took off the host
    freed_bytes: int = 0
    layers: int | None = None
    hidden: int | None = None
    dtype: str | None = None
    hist: Histogram = field(default_factory=Histogram)  # rows per length band, in tokens

    @property
    def on_host(self) -> int:
        return self.bytes - self.freed_bytes


@dataclass
class ReportHistory:
    # [bin middle, tokens/s] from records; tokens/s null inside an idle gap (drawn as a gap)
    points: list[list[float | None]] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # runner starts
    mean_tps: float | None = None  # response tokens / seconds the job was making records


@dataclass
class RecoverEvent:
    """One line of run/recover.jsonl: a death the watcher saw, a restart, a give-up."""

    at: float = 0.0
    what: str = "?"  # server | runner | watcher (the runner starts a watcher gone again)
    event: str = "?"  # died | restarted | gave_up ...
    why: str | None = None
    log: list[str] | None = None  # a give-up: the lines of the log that say why


@dataclass
class DraftResult:
    """One dataset's measure of one draft (the draft stage's files on the host)."""

    answered: int = 0
    counts: DraftCounts = field(default_factory=DraftCounts)
    tokens: int = 0  # output tokens of the answers made in `seconds`
    seconds: float = 0.0  # the time a request of it was in flight (status.DraftKept)


@dataclass
class ReportDraft:
    """A draft the draft stage measured (hosts.yaml's server.draft), and its measure per dataset."""

    tag: str = ""
    model: str = ""
    method: str = ""
    num_speculative_tokens: int = 0
    baseline: bool = False  # the same prompts without a draft (`--stage baseline`): its speed
    datasets: dict[str, DraftResult] = field(default_factory=dict)


@dataclass
class ReportAnswer:
    """`ctl report`: what the page draws, gathered in one pass over the outputs."""

    host: str = ""
    status: JobView = field(default_factory=JobView)
    max_tokens: int | None = None
    datasets: dict[str, ReportDataset] = field(default_factory=dict)
    history: ReportHistory = field(default_factory=ReportHistory)
    restarts: list[RecoverEvent] = field(default_factory=list)
    stage: dict[str, ReportStage] = field(default_factory=dict)  # datasets the stage has rows of
    stage_history: ReportHistory = field(default_factory=ReportHistory)  # tokens in rows per second
    drafts: list[ReportDraft] = field(default_factory=list)  # the draft stage's, oldest first
    train_curve: ReportHistory = field(default_factory=ReportHistory)  # [time, loss] per step
    # runner starts per stage, every runner's (the answers' history keeps them all)
    runner_starts: dict[str, int] = field(default_factory=dict)
