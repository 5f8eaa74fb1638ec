"""hosts.yaml: loaded once, validated into frozen dataclasses. Every error names its key."""

from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from remote.common.units import DATASET_NAME_RE, parse_tokens

from .errors import ConfigError

CONFIG_ENV = "DEPLOYTOOL_CONFIG"
HOST_KEY_MODES = ("strict", "accept-new")
CONNECT_KINDS = ("ssh", "local")
ENGINE_KINDS = ("openai", "simulate")
SAMPLING_KEYS = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "n",
)


@dataclass(frozen=True)
class HostConfig:
    name: str
    connect: str = "ssh"
    host: str | None = None  # address or ~/.ssh/config alias; default: the entry's name
    user: str | None = None
    port: int | None = None
    remote_dir: str = "~/eagle3-train"
    python: str = "python3"
    host_key: str = "strict"
    known_hosts: str | None = None  # default: ~/.ssh/known_hosts
    identity_file: str | None = None
    gateway: str | None = None  # another host entry's name, or user@host[:port]
    forward_agent: bool = False
    keepalive: int = 30
    connect_timeout: int = 15
    keep_releases: int = 5

    @property
    def is_local(self) -> bool:
        return self.connect == "local"

    @property
    def address(self) -> str:
        return self.host or self.name


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    prompts: str
    est_tokens: int = 2000


@dataclass(frozen=True)
class EngineSpec:
    kind: str = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"  # the first of base_urls
    # every server of the job; `concurrency` requests in flight on each
    base_urls: tuple[str, ...] = ()
    model: str = "default"
    concurrency: int = 256
    api_key_env: str | None = None  # name of an env var on the host holding the API key
    request_timeout: float = 3600.0
    max_retries: int = 8
    retry_base: float = 1.0  # first backoff in seconds; doubles per attempt, with jitter
    down_deadline: float = 1800.0  # seconds the engine may be unreachable before the run fails
    tokens_per_s: float = 50_000.0  # simulate only: aggregate generation speed
    stall_minutes: float = 10.0
    metrics_interval: float = 10.0  # seconds between /metrics and nvidia-smi samples; 0: off


@dataclass(frozen=True)
class JobSpec:
    datasets: tuple[DatasetSpec, ...]
    engine: EngineSpec
    sampling: dict = field(default_factory=dict)
    chat_template_kwargs: dict = field(default_factory=dict)
    # sent as-is with every request; part of the fingerprint
    extra_body: dict = field(default_factory=dict)
    notify: dict = field(default_factory=dict)  # command, on, timeout: see NOTIFY_EVENTS

    def dataset_names(self) -> list[str]:
        return [d.name for d in self.datasets]

    def to_dict(self) -> dict:
        """The job spec as the runner reads it (job.json inside a release)."""
        engine = asdict(self.engine)
        engine["base_urls"] = list(self.engine.base_urls)
        return {
            "datasets": {
                d.name: {"prompts": d.prompts, "est_tokens": d.est_tokens} for d in self.datasets
            },
            "engine": engine,
            "sampling": dict(self.sampling),
            "chat_template_kwargs": dict(self.chat_template_kwargs),
            "extra_body": dict(self.extra_body),
            "notify": dict(self.notify),
        }


@dataclass(frozen=True)
class ServerSpec:
    command: str | None = None
    model: str = "default"
    port: int = 8000
    args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    ready_timeout: int = 1800
    headless: bool = (
        False  # a vLLM data-parallel worker (--headless): serves no HTTP; ready when alive
    )


@dataclass(frozen=True)
class Config:
    path: Path
    default_host: str
    hosts: dict[str, HostConfig]
    job: JobSpec  # the top-level job; a host may override parts of it (job_for)
    server: ServerSpec
    host_jobs: dict[str, JobSpec] = field(default_factory=dict)  # hosts with a `job:` of their own
    host_servers: dict[str, ServerSpec] = field(default_factory=dict)

    def job_for(self, host: str) -> JobSpec:
        return self.host_jobs.get(host, self.job)

    def server_for(self, host: str) -> ServerSpec:
        return self.host_servers.get(host, self.server)

    def host(self, name: str) -> HostConfig:
        if name not in self.hosts:
            raise ConfigError(
                f"unknown host {name!r}{_suggest(name, self.hosts)}; configured: {', '.join(self.hosts)}"
            )
        return self.hosts[name]

    def select_hosts(self, spec: str | None) -> list[HostConfig]:
        names = [n.strip() for n in (spec or self.default_host).split(",") if n.strip()]
        if not names:
            raise ConfigError("--host: no host named")
        return [self.host(n) for n in names]

    @property
    def base_dir(self) -> Path:
        return self.path.parent


# ---------------------------------------------------------------- validation helpers


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _check_keys(where: str, data: dict, allowed) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key{_suggest(key, allowed)}".lstrip("."))


def _mapping(where: str, value: Any, *, optional=True) -> dict:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {_show(value)}")
    return value


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str, Any], int]:
    def check(where: str, v: Any) -> int:
        ok = isinstance(v, int) and not isinstance(v, bool)
        if ok and (lo is None or v >= lo) and (hi is None or v <= hi):
            return v
        rng = f" {lo}-{hi}" if hi is not None else (f" >= {lo}" if lo is not None else "")
        raise ConfigError(f"{where}: expected an integer{rng}, got {_show(v)}")

    return check


def _num(lo: float = 0.0) -> Callable[[str, Any], float]:
    def check(where: str, v: Any) -> float:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= lo:
            return float(v)
        raise ConfigError(f"{where}: expected a number >= {lo:g}, got {_show(v)}")

    return check


def _str(where: str, v: Any) -> str:
    if isinstance(v, str) and v.strip():
        return v
    raise ConfigError(f"{where}: expected a non-empty string, got {_show(v)}")


def _bool(where: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise ConfigError(f"{where}: expected true or false, got {_show(v)}")


def _choice(choices) -> Callable[[str, Any], str]:
    def check(where: str, v: Any) -> str:
        if v in choices:
            return v
        raise ConfigError(
            f"{where}: expected one of {', '.join(choices)}, got {_show(v)}{_suggest(v, choices)}"
        )

    return check


def _str_list(where: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise ConfigError(f"{where}: expected a list of strings, got {_show(v)}")
    out = []
    for i, item in enumerate(v):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ConfigError(f"{where}[{i}]: expected a string, got {_show(item)}")
        out.append(str(item))  # YAML turns "8" into 8 when unquoted; argv wants strings
    return tuple(out)


def _str_map(where: str, v: Any) -> dict:
    v = _mapping(where, v)
    for k, val in v.items():
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            raise ConfigError(f"{where}.{k}: expected a string, got {_show(val)}")
    return {str(k): str(val) for k, val in v.items()}


def _free_map(where: str, v: Any) -> dict:
    return dict(_mapping(where, v))


def _url(where: str, v: Any) -> str:
    v = _str(where, v)
    if not v.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: expected an http:// or https:// URL, got {_show(v)}")
    return v


def _url_list(where: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not v:
        raise ConfigError(f"{where}: expected a list of one or more URLs, got {_show(v)}")
    urls = tuple(_url(f"{where}[{i}]", u) for i, u in enumerate(v))
    dup = next((u for u in urls if urls.count(u) > 1), None)
    if dup:
        raise ConfigError(f"{where}: {dup} is listed twice")
    return urls


def _tokens(where: str, v: Any) -> int:
    try:
        n = parse_tokens(v)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    if n <= 0:
        raise ConfigError(f"{where}: expected a positive token count, got {_show(v)}")
    return n


HOST_FIELDS: dict[str, Callable[[str, Any], Any]] = {
    "connect": _choice(CONNECT_KINDS),
    "host": _str,
    "user": _str,
    "port": _int(1, 65535),
    "remote_dir": _str,
    "python": _str,
    "host_key": _choice(HOST_KEY_MODES),
    "known_hosts": _str,
    "identity_file": _str,
    "gateway": _str,
    "forward_agent": _bool,
    "keepalive": _int(0),
    "connect_timeout": _int(1),
    "keep_releases": _int(2),
}
ENGINE_FIELDS = {
    "kind": _choice(ENGINE_KINDS),
    "base_url": _url,
    "base_urls": _url_list,
    "model": _str,
    "concurrency": _int(1, 100_000),
    "api_key_env": _str,
    "request_timeout": _num(1.0),
    "max_retries": _int(0),
    "retry_base": _num(0.0),
    "down_deadline": _num(0.0),
    "tokens_per_s": _num(1.0),
    "stall_minutes": _num(0.0),
    "metrics_interval": _num(0.0),
}
SERVER_FIELDS = {
    "command": _str,
    "model": _str,
    "port": _int(1, 65535),
    "args": _str_list,
    "env": _str_map,
    "ready_timeout": _int(1),
    "headless": _bool,
}
# what hosts.NAME.job may hold
HOST_OVERRIDES = (
    "engine",
    "sampling",
    "extra_body",
    "notify",
    "chat_template_kwargs",
)


def _fields(where: str, data: dict, spec: dict) -> dict:
    _check_keys(where, data, spec)
    return {k: spec[k](f"{where}.{k}", v) for k, v in data.items()}


def _parse_host(name: str, defaults: dict, raw: Any) -> HostConfig:
    where = f"hosts.{name}"
    if not isinstance(name, str) or not name:
        raise ConfigError(f"hosts: host names must be non-empty strings, got {_show(name)}")
    values = dict(defaults)
    raw = _mapping(where, raw)
    _check_keys(where, raw, [*HOST_FIELDS, "job", "server"])
    own = {
        k: v for k, v in raw.items() if k not in ("job", "server")
    }  # job/server overrides: parsed apart
    values.update(_fields(where, own, HOST_FIELDS))
    if values.get("connect", "ssh") == "ssh" and "host" not in values:
        values["host"] = name  # an ~/.ssh/config alias works as the entry's name
    return HostConfig(name=name, **values)


def _engine(where: str, raw: dict) -> EngineSpec:
    values = _fields(where, _mapping(where, raw), ENGINE_FIELDS)
    if "base_url" in values and "base_urls" in values:
        raise ConfigError(f"{where}: give base_url (one server) or base_urls (several), not both")
    urls = values.pop("base_urls", None) or (values.get("base_url", EngineSpec.base_url),)
    return EngineSpec(**dict(values, base_url=urls[0], base_urls=tuple(urls)))


def _merge_job(name: str, top: dict, override: Any) -> dict:
    """hosts.NAME.job over the top-level job, key by key inside each mapping; every key checked under its
    own name (hosts.NAME.job.engine.kind), not the merged one."""
    where = f"hosts.{name}.job"
    override = _mapping(where, override)
    _check_keys(where, override, HOST_OVERRIDES)
    merged = dict(top)
    for key, value in override.items():
        value = _mapping(f"{where}.{key}", value)
        if key == "engine":
            _fields(f"{where}.engine", value, ENGINE_FIELDS)
            if (
                "base_url" in value or "base_urls" in value
            ):  # a host's own server(s) replace the top-level ones
                base = {
                    k: v
                    for k, v in (top.get("engine") or {}).items()
                    if k not in ("base_url", "base_urls")
                }
            else:
                base = dict(top.get("engine") or {})
            merged["engine"] = dict(base, **value)
        else:
            merged[key] = dict(top.get(key) or {}, **value)
    return merged


def _parse_job(raw: Any, where: str = "job") -> JobSpec:
    job = _mapping("job", raw, optional=False)
    _check_keys(
        "job",
        job,
        ("datasets", "engine", "sampling", "chat_template_kwargs", "extra_body", "notify"),
    )
    ds_raw = _mapping("job.datasets", job.get("datasets"), optional=False)
    if not ds_raw:
        raise ConfigError("job.datasets: expected at least one dataset")
    datasets = []
    for name, spec in ds_raw.items():
        at = f"job.datasets.{name}"
        if not isinstance(name, str) or not DATASET_NAME_RE.match(name):
            raise ConfigError(f"{at}: dataset name must match {DATASET_NAME_RE.pattern}")
        spec = _mapping(at, spec, optional=False)
        _check_keys(at, spec, ("prompts", "est_tokens"))
        if "prompts" not in spec:
            raise ConfigError(f"{at}.prompts: required (path on the host, relative to remote_dir)")
        prompts = _str(f"{at}.prompts", spec["prompts"])
        if prompts.startswith("/") or ".." in Path(prompts).parts:
            raise ConfigError(
                f"{at}.prompts: must be a relative path inside remote_dir, got {_show(prompts)}"
            )
        est = _tokens(f"{at}.est_tokens", spec.get("est_tokens", 2000))
        datasets.append(DatasetSpec(name=name, prompts=prompts, est_tokens=est))
    engine = _engine(f"{where}.engine", job.get("engine"))
    sampling = _mapping(f"{where}.sampling", job.get("sampling"))
    for key in sampling:
        if key not in SAMPLING_KEYS:
            raise ConfigError(
                f"{where}.sampling.{key}: unknown key{_suggest(key, SAMPLING_KEYS)}; fields beyond "
                "OpenAI's sampling (vLLM's repetition_detection, thinking_token_budget, …) "
                "go in job.extra_body"
            )
    if "max_tokens" in sampling:
        sampling = dict(
            sampling, max_tokens=_tokens(f"{where}.sampling.max_tokens", sampling["max_tokens"])
        )
    for key in ("temperature", "top_p", "min_p"):
        if key in sampling:
            _num(0.0)(f"{where}.sampling.{key}", sampling[key])
    kwargs = _free_map(f"{where}.chat_template_kwargs", job.get("chat_template_kwargs"))
    extra = _free_map(f"{where}.extra_body", job.get("extra_body"))
    clash = sorted(
        set(extra) & ({"model", "messages", "chat_template_kwargs"} | set(SAMPLING_KEYS))
    )
    if clash:
        raise ConfigError(
            f"{where}.extra_body.{clash[0]}: set it in its own place (job.sampling, "
            "job.chat_template_kwargs, job.engine.model), not in extra_body"
        )
    return JobSpec(
        datasets=tuple(datasets),
        engine=engine,
        sampling=dict(sampling),
        chat_template_kwargs=kwargs,
        extra_body=extra,
        notify=_notify(f"{where}.notify", job.get("notify")),
    )


NOTIFY_EVENTS = ("finished", "failed", "stalled", "engine_down", "disk_full", "engine_up")


def _notify(where: str, raw: Any) -> dict:
    """job.notify: {command, on: [events] (default: all but engine_up), timeout: seconds}."""
    if raw is None:
        return {}
    raw = _mapping(where, raw)
    _check_keys(where, raw, ("command", "on", "timeout"))
    if "command" not in raw:
        raise ConfigError(f"{where}.command: required (a shell command run on the host with sh -c)")
    out = {"command": _str(f"{where}.command", raw["command"])}
    if "on" in raw:
        events = _str_list(f"{where}.on", raw["on"])
        for i, e in enumerate(events):
            _choice(NOTIFY_EVENTS)(f"{where}.on[{i}]", e)
        out["on"] = list(events)
    if "timeout" in raw:
        out["timeout"] = _num(1.0)(f"{where}.timeout", raw["timeout"])
    return out


def parse_config(data: Any, path: Path) -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    _check_keys("", data, ("default_host", "defaults", "hosts", "job", "server"))
    defaults = _fields("defaults", _mapping("defaults", data.get("defaults")), HOST_FIELDS)
    hosts_raw = _mapping("hosts", data.get("hosts"), optional=False)
    if not hosts_raw:
        raise ConfigError("hosts: expected at least one host")
    hosts = {name: _parse_host(name, defaults, raw) for name, raw in hosts_raw.items()}
    for h in hosts.values():
        if h.gateway and h.gateway == h.name:
            raise ConfigError(f"hosts.{h.name}.gateway: a host cannot be its own gateway")
    default_host = data.get("default_host")
    if default_host is None:
        default_host = next(iter(hosts))
    if default_host not in hosts:
        raise ConfigError(
            f"default_host: {_show(default_host)} is not in hosts{_suggest(default_host, hosts)}"
        )
    job = _parse_job(data.get("job"))
    server = _fields("server", _mapping("server", data.get("server")), SERVER_FIELDS)
    host_jobs, host_servers = {}, {}
    for name, raw in hosts_raw.items():
        if not isinstance(raw, dict):
            continue
        if raw.get("job") is not None:
            host_jobs[name] = _parse_job(
                _merge_job(name, data["job"], raw["job"]), where=f"hosts.{name}.job"
            )
        if raw.get("server") is not None:
            where = f"hosts.{name}.server"
            host_servers[name] = ServerSpec(
                **dict(server, **_fields(where, _mapping(where, raw["server"]), SERVER_FIELDS))
            )
    return Config(
        path=path,
        default_host=default_host,
        hosts=hosts,
        job=job,
        server=ServerSpec(**server),
        host_jobs=host_jobs,
        host_servers=host_servers,
    )


def find_config(explicit: str | None = None) -> Path:
    """--config, else $DEPLOYTOOL_CONFIG, else ./hosts.yaml."""
    return Path(explicit or os.environ.get(CONFIG_ENV) or "hosts.yaml")


def load_config(path: str | os.PathLike | None = None) -> Config:
    p = find_config(str(path) if path else None)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"{p}: config file not found (pass --config or set {CONFIG_ENV})"
        ) from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read config: {e.strerror}") from None
    try:
        # libyaml: 10x faster
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise ConfigError(f"{p}: YAML syntax error at {where}: {e.problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: YAML error: {e}") from None
    return parse_config(data, p.resolve())
