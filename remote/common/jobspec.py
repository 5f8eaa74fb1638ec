"""The deployed job spec (job.json in a release) and the host's paths."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .codec import Codec, from_dict, plain, read_json
from .keys import (
    BadValue,
    boolean,
    checks,
    choice,
    fields_of,
    int_in,
    mapping,
    number,
    relative_path,
    setting,
    show,
    string,
    string_list,
    string_map,
    tokens,
    url,
    url_list,
)

JOB_FILE = "job.json"
# marks the watcher's lines in runner.log (a death, a restart): a reader of the runner's own words
# for why it ended leaves them out
WATCHER_MARK = "[watcher]"
JOB_TOKEN_ENV = "DEPLOYTOOL_JOB_TOKEN"  # the runner's token, inherited by anything it starts: stop finds them by it
SERVER_TOKEN_ENV = "DEPLOYTOOL_SERVER_TOKEN"  # the inference server's, likewise


NOTIFY_EVENTS = (
    "finished",
    "failed",
    "stalled",
    "engine_down",
    "disk_full",
    "engine_degraded",
    "server_restarted",
    "runner_restarted",
    "watcher_restarted",
    "trainer_restarted",
    "engine_up",
)
NOTIFY_DEFAULT = NOTIFY_EVENTS[:-1]  # engine_up only when asked for
NOTIFY_TIMEOUT_S = 60.0  # a notify command still running after this is killed
# the watcher's: found by it and its start time, never a name
WATCH_TOKEN_ENV = "DEPLOYTOOL_WATCH_TOKEN"


TURNS = ("last", "all")


# fewer records than this, and a dataset's measured mean response length is noise: est_tokens
MIN_MEASURED = 50


@dataclass(frozen=True)
class DatasetSpec:
    """hosts.yaml `job.datasets.NAME`, each key declared once (its default and its check)."""

    name: str
    prompts: str = setting(check=relative_path, required=True)  # path on the host, in remote_dir
    est_tokens: int = setting(2000, tokens)  # expected mean response length, until measured
    # last: answer the conversation's final user turn; all: drop the original assistant turns and
    # regenerate every one in order (one record per conversation)
    turns: str = setting("last", choice(TURNS))
    # the draft stage's prompts for this dataset, a file of the user's own (path on the host, as
    # `prompts`); None: the prompts after its cap
    eval_prompts: str | None = setting(None, relative_path)

    def expected_tokens(self, records: int, mean: float | None) -> float:
        """What a record still to make will take, `mean` measured over `records`: that mean once
        MIN_MEASURED are; until then est_tokens at least (short answers end first, so a young mean
        is too low)."""
        if records >= MIN_MEASURED and mean is not None:
            return mean
        return max(mean or 0.0, float(self.est_tokens))

    def files(self) -> tuple[str, ...]:
        """Its prompt files on the host: the prompts, and the draft stage's own where it has one."""
        return (self.prompts, self.eval_prompts) if self.eval_prompts else (self.prompts,)

    def to_dict(self) -> dict:
        """Its keys in job.json (its name is the key it is under), every field without a list."""
        out = plain(self)
        del out["name"]
        return out


ENGINE_KINDS = ("openai", "simulate")


@dataclass(frozen=True)
class EngineSpec:
    """job.engine, each key declared once (its default and its check)."""

    kind: str = setting("openai", choice(ENGINE_KINDS))  # openai (vLLM, any OpenAI server)
    base_url: str = setting("http://127.0.0.1:8000/v1", url)  # the first of base_urls
    # every server of the job; `concurrency` requests in flight on each
    base_urls: tuple[str, ...] = setting((), url_list)
    model: str = setting("default", string)
    concurrency: int = setting(256, int_in(1, 100_000))
    api_key_env: str | None = setting(None, string)  # an env var on the host holding the API key
    request_timeout: float = setting(3600.0, number(1.0))
    max_retries: int = setting(8, int_in(0))
    retry_base: float = setting(1.0, number(0.0))  # first backoff in seconds; doubles, with jitter
    down_deadline: float = setting(1800.0, number(0.0))  # seconds every server may be unreachable
    tokens_per_s: float = setting(50_000.0, number(1.0))  # simulate only: speed at full concurrency
    stall_minutes: float = setting(10.0, number(0.0))
    metrics_interval: float = setting(10.0, number(0.0))  # between /metrics and nvidia-smi samples
    stream: bool = setting(True, boolean)  # streamed: a request that stops making progress is seen
    # seconds from sending to the first token: a request may rightly wait in vLLM's queue for as
    # long as a whole answer takes (Kimi-K2.5: up to ~15 min under full load on 8 GPUs)
    first_token_timeout: float = setting(1800.0, number(1.0))
    progress_timeout: float = setting(300.0, number(1.0))  # between tokens once they flow
    # where the server's reasoning parser ends the thinking: a continued answer is split there
    thinking_end: str = setting("</think>", string)

    @property
    def max_requeues(self) -> int:
        """Times a request may be sent again because its server went away under it (down, or
        stuck on it): a prompt that takes every server down with it, or always hangs, fails."""
        return max(16, 2 * self.max_retries)

    def urls(self) -> list[str]:
        """Every server, without a trailing slash."""
        return [u.rstrip("/") for u in (self.base_urls or (self.base_url,))]

    @classmethod
    def from_dict(cls, d: dict) -> "EngineSpec":
        if unknown := set(d) - set(cls.__dataclass_fields__):
            raise ValueError(f"unknown job.engine keys {sorted(unknown)}")
        d = dict(d)
        if d.get("base_urls"):
            d.setdefault("base_url", d["base_urls"][0])
        return from_dict(cls, d)

    def to_dict(self) -> dict:
        return plain(self, keep_none=True)


LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost; a name that is not one of them may resolve anywhere."""
    import ipaddress

    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def flag_value(args, flag: str) -> str | None:
    """The value a command line gives `flag` (`--flag V` or `--flag=V`; the last one wins)."""
    found = None
    args = list(args)
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(flag + "="):
            found = a[len(flag) + 1 :]
    return found


def extracts(args) -> bool:
    """Whether a vLLM command line makes hidden states (a KV connector writes them)."""
    return flag_value(args, "--kv-transfer-config") is not None


def masked_args(args) -> list[str]:
    """A command line with the value of `--api-key` hidden (pid files, printouts, logs)."""
    out, hide = [], False
    for a in args:
        if hide:
            out.append("****")
            hide = False
        elif a == "--api-key":
            out.append(a)
            hide = True
        elif a.startswith("--api-key="):
            out.append("--api-key=****")
        else:
            out.append(a)
    return out


def _layers(where: str, v) -> list[int]:
    ints = (
        isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    )
    if not ints or min(v) < 0 or len(set(v)) != len(v):
        raise BadValue(
            f"{where}: expected distinct layer numbers from 0, like [2, 30, 58, 61], got {show(v)}"
        )
    return list(v)


HIDDEN_SERVER_KEYS = {"layers": _layers, "connector": string, "connector_module": string}


def hidden_server(where: str, raw) -> dict:
    """`server.hidden_states`: the layers to keep and vLLM's connector for the hidden-states stage."""
    return fields_of(where, mapping(where, raw), HIDDEN_SERVER_KEYS)


# vLLM's speculative methods that take a draft model (its --speculative-config `method`)
DRAFT_METHODS = ("eagle3", "eagle", "draft_model", "mtp", "medusa", "mlp_speculator")


@dataclass(frozen=True)
class DraftSpec(Codec):
    """hosts.yaml `server.draft:`: the draft the draft stage measures, every default stated once."""

    model: str = setting(check=string, required=True)  # a folder on the host, or a model id
    method: str = setting("eagle3", choice(DRAFT_METHODS))
    num_speculative_tokens: int = setting(3, int_in(1, 16))
    eval_samples: int = setting(200, int_in(1))  # held-out prompts asked per dataset


def _weights(where: str, raw) -> dict:
    """`train.weights`: a dataset's rows repeated this many times in the training data."""
    return {str(k): int_in(1)(f"{where}.{k}", v) for k, v in mapping(where, raw).items()}


@dataclass(frozen=True)
class TrainSpec(Codec):
    """hosts.yaml `job.train:`: the train stage's trainer (speculators' offline EAGLE-3 trainer, in a
    venv of its own on the host) and its settings, every default stated once."""

    # a pip requirement the host installs into a venv of its own under <remote_dir>/venvs/
    trainer: str = setting("speculators==0.9.0", string)
    python: str | None = setting(None, string)  # a Python that has the trainer: nothing installed
    epochs: int = setting(3, int_in(1))
    lr: float = setting(1e-3, number(0.0))
    total_seq_len: int = setting(8192, int_in(16))  # tokens packed into one step
    draft_layers: int = setting(1, int_in(1))
    draft_vocab: int | None = setting(None, int_in(1))  # None: the target's whole vocabulary
    checkpoint_freq: float = setting(0.25, number(0.01))  # of an epoch: how often it saves
    # the target's layers the draft reads (None: server.hidden_states.layers but the last)
    target_layers: list | None = setting(None, _layers)
    weights: dict = setting(check=_weights, factory=dict)
    args: tuple[str, ...] = setting((), string_list)  # more of the trainer's own flags
    gpus: int | None = setting(None, int_in(1))  # the trainer's (None: every GPU the host has)
    # a trainer that writes nothing this long is hung (a stuck collective): killed, started again
    hung_minutes: float = setting(30.0, number(0.01))


def train_datasets(paths: "Paths", job: "JobSpec", caps) -> list[str]:
    """The datasets the train stage trains on: those the caps select that have hidden-states
    rows."""
    names = [d.name for d in job.datasets if caps.selected(d.name)]
    return [n for n in names if (paths.hidden_states / n / "rows.jsonl").is_file()]


def train_refusal(paths: "Paths", job: "JobSpec | None", caps) -> str | None:
    """Why the train stage cannot start on this host (None: it can), said before the server it
    stops is stopped: no job.train, no hidden-states rows among the datasets the caps select, a
    job.train.python that is not there."""
    import shutil

    if job is None or not job.train:
        return (
            "the train stage trains the draft job.train describes, and the deployed job has "
            "none: add job.train to hosts.yaml (docs/train.md), `invoke deploy`, then the restart "
            "again"
        )
    if not train_datasets(paths, job, caps):
        names = [d.name for d in job.datasets if caps.selected(d.name)]
        return (
            "the train stage trains on the hidden-states stage's rows, and there are none for "
            f"{', '.join(names)}: `invoke restart --stage hidden-states` first"
        )
    python = job.trainer.python
    if python and shutil.which(python) is None:
        return f"job.train.python {python}: no such Python on this host"
    if job.engine.kind == "simulate" and not python and job.trainer.trainer == TrainSpec.trainer:
        return (
            "the built-in simulated engine's rows are stand-ins, and its host has no trainer: "
            f"training them would install {TrainSpec.trainer} and torch (gigabytes) for nothing; "
            "train on a GPU host's hidden states (docs/train.md), or set job.train.python to a "
            "Python that has the trainer"
        )
    return None


# where `invoke deploy` puts a draft folder of the deploying machine on the host: <name> each, a
# fixed place beside the job's data, never in a release (remote/host/release.py says it as text); a
# link to the version it reads from, .<name>.v-<digest>/ beside it, switched whole
DRAFT_COPIES = "data/draft-models"
UPLOAD_END = "end"  # a deploy upload's last member: the host switches to no upload without it
DEPLOY_ABORT = "abort"  # the line deploy sends after the host's plan where it refuses to go on


TRAINED = "trained"  # server.draft.model's name for the train stage's draft (Paths.trained_draft)


def draft_folder(model: str, root: Path) -> Path | None:
    """The folder a draft's `model` names (`/…`, `~/…`, `./…`, `../…`; a relative one from `root`;
    `trained`: the train stage's), or None for a model id. Whether it exists is the caller's to
    see."""
    if model == TRAINED:
        return Paths(root).trained_draft
    if not str(model).startswith(("/", "~", "./", "../")):
        return None
    folder = Path(model).expanduser()
    return folder if folder.is_absolute() else root / folder


def draft_server(where: str, raw) -> dict:
    """`server.draft`: the draft the draft stage measures (a folder on the host or a model id)."""
    got = fields_of(where, mapping(where, raw), checks(DraftSpec))
    if got and "model" not in got:
        raise BadValue(f"{where}: needs model: the draft's folder on the host, or its model id")
    return DraftSpec(**got).to_dict() if got else {}


@dataclass(frozen=True)
class ServerSpec(Codec):
    """hosts.yaml `server:`, what `server start` runs (`COMMAND serve MODEL --port PORT ARGS...`),
    with every default stated once."""

    command: str | None = setting(None, string)  # default: the `vllm` beside the host's python
    model: str = setting("default", string)
    port: int = setting(8000, int_in(1, 65535))
    args: tuple[str, ...] = setting((), string_list)
    env: dict = setting(check=string_map, factory=dict)
    ready_timeout: int = setting(1800, int_in(1))  # seconds to wait for GET /v1/models
    headless: bool = setting(False, boolean)  # a vLLM data-parallel worker (--headless): no HTTP
    # the hidden-states stage's server: {layers: [...], connector: NAME, connector_module: MODULE}
    hidden_states: dict = setting(check=hidden_server, factory=dict)
    # the draft stage's draft: {model: FOLDER_OR_ID, method, num_speculative_tokens, eval_samples}
    draft: dict = setting(check=draft_server, factory=dict)

    KEEP_NONE = True  # `command: null` said: the vllm beside python

    @classmethod
    def from_dict(cls, d: dict | None) -> "ServerSpec":
        return super().from_dict(d or {})

    @property
    def listen_host(self) -> str:
        """Where vLLM listens: its `--host`, else loopback only (server start adds --host 127.0.0.1:
        vLLM alone would listen on every interface)."""
        return flag_value(self.args, "--host") or LOOPBACK

    @property
    def beyond_loopback(self) -> bool:
        return not is_loopback(self.listen_host)

    @property
    def api_key(self) -> str | None:
        """The key vLLM asks of every request: `--api-key`, else the VLLM_API_KEY it reads."""
        return flag_value(self.args, "--api-key") or self.env.get("VLLM_API_KEY") or None

    def exposure_problem(self) -> str | None:
        """Why this server must not start: it would listen beyond loopback and ask no key."""
        if self.headless or not self.beyond_loopback or self.api_key:
            return None
        return (
            f"listens on {self.listen_host} (--host) and asks no API key: anyone who can "
            f"reach port {self.port} could use the model. Set server.env.VLLM_API_KEY (vLLM reads "
            "it; the runner sends it), or drop --host to listen on 127.0.0.1 only"
        )

    @property
    def data_parallel_member(self) -> bool:
        """One host cannot restart a vLLM data-parallel group: its members are named, not restarted."""
        return self.headless or "--data-parallel-address" in self.args


_MAPPINGS = ("sampling", "chat_template_kwargs", "extra_body", "notify")  # JobSpec's, kept as given
# a setting a dataset's meta file predates reads as its empty value: adding one later is no change
SETTING_ABSENT = {"extra_body": {}, "turns": "last"}


def settings_then(meta: dict, now: dict) -> dict:
    """The settings a dataset's meta file says its records were made with, each of `now`'s."""
    return {k: meta.get(k, SETTING_ABSENT.get(k)) for k in now}


def settings_changed(meta: dict, now: dict, accepted: bool = True) -> dict[str, tuple]:
    """The settings of `now` that differ from its records': {setting: (then, now)}. None where a
    `--force` has taken `now` for the records to come (the meta file's `accepted`, kept until they
    are made), so the flag is given once, not at every restart until then; `accepted=False`: the
    records' own settings alone."""
    if accepted and isinstance(meta.get("accepted"), dict):
        if settings_then(meta["accepted"], now) == now:
            return {}
    then = settings_then(meta, now)
    return {k: (then[k], now[k]) for k in now if then[k] != now[k]}


_UNSET = object()


def job_changes(before: dict, after: dict) -> dict[str, tuple]:
    """job.json's top-level keys whose values differ: key -> (before, after) (for changes_text)."""
    keys = sorted(set(before) | set(after))
    pairs = {k: (before.get(k), after.get(k)) for k in keys}
    return {k: v for k, v in pairs.items() if v[0] != v[1]}


def changes_text(changed: dict[str, tuple]) -> str:
    """`sampling.temperature 1.0 → 0.7; turns "last" → "all"`: mappings down to the values that
    changed, each value as JSON has it (`(unset)`: not given)."""
    out = []

    def walk(path: str, then, now) -> None:
        if isinstance(then, dict) and isinstance(now, dict):
            for k in sorted(set(then) | set(now), key=str):
                if then.get(k, _UNSET) != now.get(k, _UNSET):
                    walk(f"{path}.{k}", then.get(k, _UNSET), now.get(k, _UNSET))
            return
        values = ["(unset)" if v is _UNSET or v is None else json.dumps(v) for v in (then, now)]
        out.append(f"{path} {values[0]} → {values[1]}")

    for k, (then, now) in changed.items():
        walk(k, then, now)
    return "; ".join(out)


def dataset_changes_text(changed: dict[str, dict[str, tuple]]) -> str:
    """Every dataset named, those with the same change together (an edit of the job's sampling
    touches them all alike): `B1, B2: their records were made with different sampling
    (sampling.temperature 1.0 → 0.7)`; `; ` between groups."""
    groups: dict[tuple, list[str]] = {}
    for ds, ch in changed.items():
        groups.setdefault((", ".join(ch), changes_text(ch)), []).append(ds)
    return "; ".join(
        f"{', '.join(names)}: {'its' if len(names) == 1 else 'their'} records were made with "
        f"different {keys} ({changes})"
        for (keys, changes), names in groups.items()
    )


def rollback_to(release: str | None) -> str:
    """The rollback that gives a refused restart the records' settings back, as a way out
    (`release`: the newest release on the host made with them; none: nothing to add)."""
    return f", or `invoke rollback --to {release}`, a release made with them" if release else ""


@dataclass(frozen=True)
class JobSpec:
    """The job (hosts.yaml `job:`, job.json in a release): typed once for both sides."""

    datasets: tuple[DatasetSpec, ...]
    engine: EngineSpec = field(default_factory=EngineSpec)
    sampling: dict = field(default_factory=dict)
    chat_template_kwargs: dict = field(default_factory=dict)
    extra_body: dict = field(default_factory=dict)  # sent as-is with every request (vLLM's extras)
    notify: dict = field(default_factory=dict)  # command, on (of NOTIFY_EVENTS), timeout
    train: dict = field(default_factory=dict)  # the train stage's settings, as given (TrainSpec)

    @property
    def trainer(self) -> "TrainSpec":
        return TrainSpec.from_dict(self.train)

    def dataset_names(self) -> list[str]:
        return [d.name for d in self.datasets]

    @property
    def model_name(self) -> str:
        """The model the records say they were made by."""
        return "simulated" if self.engine.kind == "simulate" else self.engine.model

    def settings(self, spec: DatasetSpec) -> dict:
        """What a dataset's records are made with, as its meta file (and JSON) has it: the runner
        refuses to resume a dataset into other settings, and a restart refuses it first."""
        made = {k: getattr(self, k) for k in ("sampling", "chat_template_kwargs", "extra_body")}
        return json.loads(json.dumps(dict(made, model=self.model_name, turns=spec.turns)))

    def to_dict(self) -> dict:
        """The job spec as the runner reads it (job.json inside a release)."""
        return {
            "datasets": {d.name: d.to_dict() for d in self.datasets},
            "engine": self.engine.to_dict(),
            **{k: dict(getattr(self, k)) for k in _MAPPINGS},
            **({"train": json.loads(json.dumps(self.train))} if self.train else {}),
        }

    def file_bytes(self) -> bytes:
        """job.json as a release holds it, byte for byte."""
        return (json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n").encode()

    def fingerprint(self) -> str:
        """What tells this job from another: the sha256 of its job.json."""
        import hashlib

        return hashlib.sha256(self.file_bytes()).hexdigest()

    @classmethod
    def from_dict(cls, raw: dict) -> "JobSpec":
        try:  # as the codec reads any record: a field it cannot be is the file's fault
            ds = tuple(from_dict(DatasetSpec, dict(v, name=k)) for k, v in raw["datasets"].items())
            engine = EngineSpec.from_dict(raw.get("engine") or {})
        except TypeError as e:
            raise ValueError(str(e)) from None
        train = dict(raw.get("train") or {})
        return cls(ds, engine, **{k: dict(raw.get(k) or {}) for k in _MAPPINGS}, train=train)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "JobSpec":
        with open(path) as f:
            return cls.from_dict(json.load(f))


def release_dir() -> Path:
    """The release this code runs from (the folder holding the `remote` package)."""
    return Path(__file__).resolve().parent.parent.parent


def deployed_spec(job: Path | None = None) -> JobSpec | None:
    """`job` (a job spec; default: this release's), None where it cannot be read."""
    try:
        return JobSpec.load(job or release_dir() / JOB_FILE)
    except (OSError, ValueError, KeyError):
        return None


def default_root() -> Path:
    """<remote_dir> for a deployed release: <remote_dir>/releases/<id>/remote/ -> <remote_dir>."""
    rel = release_dir()
    return rel.parent.parent if rel.parent.name == "releases" else Path.cwd()


def _under(rel: str) -> functools.cached_property:
    """A path under the job's root, worked out on first use and then a plain attribute."""
    return functools.cached_property(lambda paths: paths.root / rel)


@dataclass(frozen=True)
class Paths:
    root: Path

    outputs = _under("data/outputs")
    # the hidden-states stage's files: <DS>/rows.jsonl and <DS>/hidden_states/hs_<n>.safetensors
    hidden_states = _under("data/hidden_states")
    # where the server writes a row's file before the stage checks it and moves it in
    hidden_incoming = _under("data/hidden_states/.incoming")
    # the stage's time and tokens per dataset ("": the job's), every runner's: its rate over its life
    hidden_made = _under("data/hidden_states/made.json")
    # the draft stage's files, a folder per draft measured: <tag>/<DS>.jsonl (its answers to the
    # held-out prompts, never training data) and <tag>/<DS>.counts.json (what vLLM counted)
    drafts = _under("data/draft")
    # the draft folders `invoke deploy` sent from the deploying machine: <name> each (a link to
    # its current version, .<name>.v-<digest>/)
    draft_copies = _under(DRAFT_COPIES)
    # the train stage's, each named by the digest of its rows: data-<d>/ (the training rows, made
    # once), checkpoints-<d>/ (the trainer's) and metrics-<d>.jsonl (a line per step it logged)
    train = _under("data/train")
    train_now = _under("data/train/current.json")  # the training under way: its digest, settings
    # the train stage's best checkpoint as vLLM serves it: `server.draft.model: trained`
    trained_draft = _under("data/trained-draft")
    trainer_log = _under("logs/trainer.log")
    trainer = _under("run/trainer.json")  # the trainer process: pid, start time
    # the host's trainer venvs, trainer-<requirement>-<hash>/ each (never the server's)
    trainer_venvs = _under("venvs")
    run = _under("run")
    logs = _under("logs")
    status = _under("run/status.json")
    pidfile = _under("run/runner.pid")
    lock = _under("run/runner.lock")
    control = _under("run/control.json")
    # when a stop was typed over another command's drain: a restart that drained starts nothing
    stop_asked = _under("run/stop_asked.json")
    log = _under("logs/runner.log")
    server_pid = _under("run/server.pid")
    server_log = _under("logs/server.log")
    watcher_pid = _under("run/watcher.pid")
    watcher_log = _under("logs/watcher.log")
    # held by the one watcher for its life (released by the kernel on kill -9)
    watcher_lock = _under("run/watcher.lock")
    watch_state = _under("run/watch.json")  # what the watcher does now (WatchState)
    # what should run: start and stop write it, the watcher reads it
    supervise = _under("run/supervise.json")
    # a line per release a runner ran from (a new one only where it differs from the last), kept
    # across runs: rollback goes back along it (remote/host/release.py reads it as plain JSON)
    ran = _under("run/ran.jsonl")
    recover_log = _under("run/recover.jsonl")  # a line per restart, kept across runs (for report)
    # a short line a minute, kept across restarts (for report)
    history = _under("run/history.jsonl")
    # state.ImportsSeen: the engine's modules this host's Python imported whole, and from what
    imports_seen = _under("run/imports.json")
    server_keys = _under("run/keys.json")  # the API keys the runner sends, the owner's to read only
    # the prompt files' offset indexes (a cache: rebuilt when a prompt file changes)
    prompt_index = _under("run/prompt-index")
    # per dataset whose prompts have no `id`, the bytes of the file its records name by line number
    # (size, sha256): a start on a file they do not begin is refused
    line_ids = _under("run/line-ids")
    # the tokens of unfinished answers, to continue them after a stop
    kept = _under("run/kept.jsonl")
    switch = _under(
        "run/switch.json"
    )  # a restart's server swap, carried out on the host (StageSwitch)
    switch_lock = _under("run/switch.lock")
    caps = _under("run/caps.json")  # the job's caps (Caps), as the last command or runner took them

    def output(self, ds: str) -> Path:
        return self.outputs / f"{ds}.jsonl"

    def errors(self, ds: str) -> Path:
        return self.outputs / f"{ds}.errors.jsonl"

    def partial(self, ds: str) -> Path:
        """Finished turns of conversations not yet recorded (turns: all)."""
        return self.outputs / f"{ds}.partial.jsonl"

    def meta(self, ds: str) -> Path:
        return self.outputs / f"{ds}.meta.json"

    def training(self, digest: str) -> dict[str, Path]:
        """A training's rows, checkpoints and loss curve, named by the digest of its rows."""
        d = digest[:12]
        names = {"data": f"data-{d}", "save": f"checkpoints-{d}", "metrics": f"metrics-{d}.jsonl"}
        return {k: self.train / v for k, v in names.items()}

    def training_now(self) -> dict[str, Path] | None:
        """The training under way (or the last one), as train_now names it; None: none."""
        digest = (read_json(self.train_now) or {}).get("digest")
        return self.training(str(digest)) if digest else None

    def ensure(self) -> None:
        for d in (self.outputs, self.run, self.logs):
            d.mkdir(parents=True, exist_ok=True)
