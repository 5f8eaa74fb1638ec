"""hosts.yaml: loaded once, validated into frozen dataclasses. Every error names its key."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remote.common.caps import DATASET_NAME_RE
from remote.common.jobspec import (
    DRAFT_COPIES,
    TRAINED,
    DatasetSpec,
    EngineSpec,
    JobSpec,
    ServerSpec,
    TrainSpec,
    draft_folder,
)
from remote.common.keys import (
    BadValue,
    boolean,
    check_keys,
    checks,
    choice,
    fields_of,
    free_map,
    int_in,
    mapping,
    setting,
    show,
    string,
    tokens,
)
from remote.common.recover import RecoverSpec
from remote.common.words import suggest

from ..errors import ConfigError
from .extras import parse_notify, parse_recover
from .locate import CONFIG_ENV, find_config

HOST_KEY_MODES = ("strict", "accept-new")
CONNECT_KINDS = ("ssh", "local")
SAMPLING_KEYS = (
    "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "seed", "stop", "n",
)  # fmt: skip

# The ranges vLLM and OpenAI accept, checked here so that a typo (temperature 7 for 0.7) is refused
# before 20 hours of answers are made with it: (lowest, highest, lowest allowed itself, whole number).
SAMPLING_RANGES = {
    "temperature": (0, 2, True, False),
    "top_p": (0, 1, False, False),
    "min_p": (0, 1, True, False),
    "top_k": (-1, None, True, True),
    "presence_penalty": (-2, 2, True, False),
    "frequency_penalty": (-2, 2, True, False),
    "repetition_penalty": (0, 2, False, False),
    "seed": (None, None, True, True),
    "n": (1, None, True, True),
}


def _in_range(where: str, v: Any, lo, hi, lo_in: bool, whole: bool) -> None:
    kinds = (int,) if whole else (int, float)
    ok = isinstance(v, kinds) and not isinstance(v, bool)
    if ok and lo is not None:
        ok = v >= lo if lo_in else v > lo
    if ok and hi is not None:
        ok = v <= hi
    if ok:
        return
    bounds = []
    if lo is not None:
        bounds.append(f"{'at least' if lo_in else 'above'} {lo}")
    if hi is not None:
        bounds.append(f"at most {hi}")
    what = " ".join(["an integer" if whole else "a number", " and ".join(bounds)]).strip()
    raise ConfigError(f"{where}: expected {what}, got {show(v)}")


@dataclass(frozen=True)
class HostConfig:
    """One entry of hosts.yaml's `hosts:` over `defaults:`, each key declared once."""

    name: str
    connect: str = setting("ssh", choice(CONNECT_KINDS))
    # address or ~/.ssh/config alias; default: the entry's name
    host: str | None = setting(None, string)
    user: str | None = setting(None, string)
    port: int | None = setting(None, int_in(1, 65535))
    remote_dir: str = setting("~/eagle3-train", string)
    python: str = setting("python3", string)
    host_key: str = setting("strict", choice(HOST_KEY_MODES))
    known_hosts: str | None = setting(None, string)  # default: ~/.ssh/known_hosts
    identity_file: str | None = setting(None, string)
    gateway: str | None = setting(None, string)  # another host entry's name, or user@host[:port]
    forward_agent: bool = setting(False, boolean)
    keepalive: int = setting(30, int_in(0))
    connect_timeout: int = setting(15, int_in(1))
    keep_releases: int = setting(5, int_in(2))

    @property
    def is_local(self) -> bool:
        return self.connect == "local"

    @property
    def address(self) -> str:
        return self.host or self.name


@dataclass(frozen=True)
class LocalDraft:
    """A draft folder of this machine that hosts.yaml's server.draft.model names."""

    written: str  # as hosts.yaml has it
    local: Path
    folder: str  # its copy on the host, relative to remote_dir


@dataclass(frozen=True)
class Config:
    path: Path
    default_host: str
    hosts: dict[str, HostConfig]
    job: JobSpec  # the top-level job; a host may override parts of it (job_for)
    server: ServerSpec
    host_jobs: dict[str, JobSpec] = field(default_factory=dict)  # hosts with a `job:` of their own
    host_servers: dict[str, ServerSpec] = field(default_factory=dict)
    recover: RecoverSpec = field(default_factory=RecoverSpec)
    host_recovers: dict[str, RecoverSpec] = field(default_factory=dict)
    # read for its hosts alone (load_config's hosts_only): its job is a stand-in, never compared
    hosts_only: bool = False

    def recover_for(self, host: str) -> RecoverSpec:
        return self.host_recovers.get(host, self.recover)

    def job_for(self, host: str) -> JobSpec:
        return self.host_jobs.get(host, self.job)

    def server_for(self, host: str) -> ServerSpec:
        """`host`'s server as the host is sent it: a draft folder of this machine named by where
        `invoke deploy` puts its copy on the host (local_draft)."""
        spec = self.host_servers.get(host, self.server)
        here = self.local_draft(host)
        if here is None:
            return spec
        return dataclasses.replace(spec, draft=dict(spec.draft, model=f"./{here.folder}"))

    def local_draft(self, host: str) -> LocalDraft | None:
        """`server.draft.model` of `host` when it names a folder of this machine (a path, from beside
        hosts.yaml where relative): `invoke deploy` sends it to the host, and the host's server
        runs that copy."""
        model = (self.host_servers.get(host, self.server).draft or {}).get("model")
        folder = draft_folder(str(model), self.base_dir) if model not in (None, TRAINED) else None
        if folder is None or not folder.is_dir():
            return None
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.resolve().name).strip(".") or "draft"
        return LocalDraft(str(model), folder, f"{DRAFT_COPIES}/{name}")

    def server_keys(self, host: str) -> dict[str, str]:
        """The API key of each server the job on `host` talks to, written once in hosts.yaml: a URL
        on loopback is `host`'s own server; another names a host entry by its name or address.
        Matched by port too, so a key goes only to the server that asks for it."""
        from urllib.parse import urlparse

        from remote.common.jobspec import is_loopback

        keys = {}
        for base in self.job_for(host).engine.urls():
            u = urlparse(base)
            port = u.port or (443 if u.scheme == "https" else 80)
            for h in self.hosts.values():
                spec = self.server_for(h.name)
                if spec.port != port or not spec.api_key:
                    continue
                here = is_loopback(u.hostname or "") and h.name == host
                if here or u.hostname in (h.name, h.address):
                    keys[base] = spec.api_key
        return keys

    def host(self, name: str) -> HostConfig:
        if name not in self.hosts:
            raise ConfigError(
                f"unknown host {name!r}{suggest(name, self.hosts)}; configured: {', '.join(self.hosts)}"
            )
        return self.hosts[name]

    def select_hosts(self, spec: str | None) -> list[HostConfig]:
        if spec is None:  # --host left out
            spec = self.default_host
        elif not spec.strip():  # typed empty (`-H "$HOSTS"` unset): never the default host
            raise ConfigError(
                f"--host: given empty ({spec!r}); leave it out for the default host "
                f"({self.default_host}), or name one (--host {next(iter(self.hosts))})"
            )
        names = [n.strip() for n in spec.split(",")]
        if not all(names):
            raise ConfigError(
                f"--host: an empty name in {spec!r}: hosts are separated by one comma "
                "(--host gpu1,gpu2)"
            )
        # a host named twice is one host: a command runs on it once
        return [self.host(n) for n in dict.fromkeys(names)]

    @property
    def base_dir(self) -> Path:
        return self.path.parent


HOST_FIELDS = checks(HostConfig)
DATASET_FIELDS = checks(DatasetSpec)
ENGINE_FIELDS = checks(EngineSpec)
SERVER_FIELDS = checks(ServerSpec)
TRAIN_FIELDS = checks(TrainSpec)
# what hosts.NAME.job may hold
HOST_OVERRIDES = (
    "engine",
    "sampling",
    "extra_body",
    "notify",
    "chat_template_kwargs",
    "train",
)  # every job key but datasets


def _parse_host(name: str, defaults: dict, raw: Any) -> HostConfig:
    where = f"hosts.{name}"
    if not isinstance(name, str) or not name:
        raise ConfigError(f"hosts: host names must be non-empty strings, got {show(name)}")
    values = dict(defaults)
    raw = mapping(where, raw)
    check_keys(where, raw, [*HOST_FIELDS, "job", "server", "recover"])
    own = {k: v for k, v in raw.items() if k not in ("job", "server", "recover")}  # parsed apart
    values.update(fields_of(where, own, HOST_FIELDS))
    if values.get("connect", "ssh") == "ssh" and "host" not in values:
        values["host"] = name  # an ~/.ssh/config alias works as the entry's name
    return HostConfig(name=name, **values)


def _engine(where: str, raw: dict) -> EngineSpec:
    values = fields_of(where, mapping(where, raw), ENGINE_FIELDS)
    if "base_url" in values and "base_urls" in values:
        raise ConfigError(f"{where}: give base_url (one server) or base_urls (several), not both")
    urls = values.pop("base_urls", None) or (values.get("base_url", EngineSpec.base_url),)
    return EngineSpec(**dict(values, base_url=urls[0], base_urls=tuple(urls)))


def _merge_job(name: str, top: dict, override: Any) -> dict:
    """hosts.NAME.job over the top-level job, key by key inside each mapping; every key checked under its
    own name (hosts.NAME.job.engine.kind), not the merged one."""
    where = f"hosts.{name}.job"
    override = mapping(where, override)
    check_keys(where, override, HOST_OVERRIDES)
    merged = dict(top)
    for key, value in override.items():
        value = mapping(f"{where}.{key}", value)
        base = top.get(key) or {}
        if key == "engine":
            fields_of(f"{where}.engine", value, ENGINE_FIELDS)
            urls = ("base_url", "base_urls")
            if any(k in value for k in urls):  # a host's own server(s) replace the top-level ones
                base = {k: v for k, v in base.items() if k not in urls}
        merged[key] = dict(base, **value)
    return merged


def _datasets(ds_raw: dict) -> list[DatasetSpec]:
    datasets = []
    for name, spec in ds_raw.items():
        at = f"job.datasets.{name}"
        if not isinstance(name, str) or not DATASET_NAME_RE.match(name):
            raise ConfigError(f"{at}: dataset name must match {DATASET_NAME_RE.pattern}")
        spec = mapping(at, spec, optional=False)
        values = fields_of(at, spec, DATASET_FIELDS)
        if "prompts" not in values:
            raise ConfigError(f"{at}.prompts: required (path on the host, relative to remote_dir)")
        datasets.append(DatasetSpec(name, **values))
    return datasets


def _parse_job(raw: Any, where: str = "job") -> JobSpec:
    job = mapping("job", raw, optional=False)
    check_keys("job", job, ("datasets", *HOST_OVERRIDES))
    ds_raw = mapping("job.datasets", job.get("datasets"), optional=False)
    if not ds_raw:
        raise ConfigError("job.datasets: expected at least one dataset")
    datasets = _datasets(ds_raw)
    engine = _engine(f"{where}.engine", job.get("engine"))
    sampling = mapping(f"{where}.sampling", job.get("sampling"))
    for key in sampling:
        if key not in SAMPLING_KEYS:
            raise ConfigError(
                f"{where}.sampling.{key}: unknown key{suggest(key, SAMPLING_KEYS)}; fields beyond "
                "OpenAI's sampling (vLLM's repetition_detection, thinking_token_budget, …) "
                "go in job.extra_body"
            )
    if "max_tokens" in sampling:
        sampling = dict(
            sampling, max_tokens=tokens(f"{where}.sampling.max_tokens", sampling["max_tokens"])
        )
    for key, value in sampling.items():
        if key in SAMPLING_RANGES:
            _in_range(f"{where}.sampling.{key}", value, *SAMPLING_RANGES[key])
    stop = sampling.get("stop", "")
    if not isinstance(stop, str) and not (
        isinstance(stop, list) and all(isinstance(s, str) for s in stop)
    ):
        raise ConfigError(
            f"{where}.sampling.stop: expected a string or a list of strings (quoted), "
            f"got {show(stop)}"
        )
    kwargs = free_map(f"{where}.chat_template_kwargs", job.get("chat_template_kwargs"))
    extra = free_map(f"{where}.extra_body", job.get("extra_body"))
    clash = sorted(
        set(extra) & ({"model", "messages", "chat_template_kwargs"} | set(SAMPLING_KEYS))
    )
    if clash:
        raise ConfigError(
            f"{where}.extra_body.{clash[0]}: set it in its own place (job.sampling, "
            "job.chat_template_kwargs, job.engine.model), not in extra_body"
        )
    train = fields_of(f"{where}.train", mapping(f"{where}.train", job.get("train")), TRAIN_FIELDS)
    if job.get("train") is not None:  # `train: {}` is every default, said whole in job.json
        train = TrainSpec.from_dict(train).to_dict()
    names = [d.name for d in datasets]
    for name in train.get("weights", {}):
        if name not in names:
            raise ConfigError(
                f"{where}.train.weights.{name}: no such dataset in job.datasets{suggest(name, names)}"
            )
    return JobSpec(
        datasets=tuple(datasets),
        engine=engine,
        sampling=dict(sampling),
        chat_template_kwargs=kwargs,
        extra_body=extra,
        notify=parse_notify(f"{where}.notify", job.get("notify")),
        train=train,
    )


def parse_config(data: Any, path: Path) -> Config:
    try:
        return _parse_config(data, path)
    except ConfigError:
        raise
    except BadValue as e:  # a key's own check: bad input as any config error
        raise ConfigError(str(e)) from None


def _parse_config(data: Any, path: Path) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level")  # the file is named where read
    check_keys("", data, ("default_host", "defaults", "hosts", "job", "server", "recover"))
    defaults = fields_of("defaults", mapping("defaults", data.get("defaults")), HOST_FIELDS)
    hosts_raw = mapping("hosts", data.get("hosts"), optional=False)
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
            f"default_host: {show(default_host)} is not in hosts{suggest(default_host, hosts)}"
        )
    job = _parse_job(data.get("job"))
    server = fields_of("server", mapping("server", data.get("server")), SERVER_FIELDS)
    recover = parse_recover("recover", data.get("recover"), RecoverSpec())
    host_jobs, host_servers, host_recovers = {}, {}, {}
    for name, raw in hosts_raw.items():
        if not isinstance(raw, dict):
            continue
        if "recover" in raw:
            host_recovers[name] = parse_recover(f"hosts.{name}.recover", raw["recover"], recover)
        if raw.get("job") is not None:
            host_jobs[name] = _parse_job(
                _merge_job(name, data["job"], raw["job"]), where=f"hosts.{name}.job"
            )
        if raw.get("server") is not None:
            where = f"hosts.{name}.server"
            host_servers[name] = ServerSpec(
                **dict(server, **fields_of(where, mapping(where, raw["server"]), SERVER_FIELDS))
            )
    for name in hosts:  # each host's server as it would start: refused before anything runs
        exposed = host_servers.get(name, ServerSpec(**server)).exposure_problem()
        if exposed:
            where = f"hosts.{name}.server" if name in host_servers else "server"
            raise ConfigError(f"{where}: {exposed}")
    return Config(
        path=path,
        default_host=default_host,
        hosts=hosts,
        job=job,
        server=ServerSpec(**server),
        host_jobs=host_jobs,
        host_servers=host_servers,
        recover=recover,
        host_recovers=host_recovers,
    )


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml: 10x faster
    """YAML's safe reading, but a key given twice in one mapping is an error: YAML keeps the last
    one silently (a dataset pasted twice would replace another without a word)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"{key!s} given twice in one mapping (first on line {seen[key] + 1}): the "
                    "second would replace the first",
                    key_node.start_mark,
                )
            if isinstance(key, Hashable):
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_config(path: str | os.PathLike | None = None, hosts_only: bool = False) -> Config:
    """hosts.yaml, checked whole. `hosts_only`: its hosts alone (their connection keys), the job,
    the server and recovery left unread (a stand-in job): what a stop, status and tail need, which a
    half-edited job section must never block."""
    p = find_config(str(path) if path else None)
    try:
        text = p.read_text()
    except FileNotFoundError:
        if path or os.environ.get(CONFIG_ENV):
            raise ConfigError(f"{p}: config file not found") from None
        raise ConfigError(
            f"no hosts.yaml in {Path.cwd()} or any folder above it: run the command from the "
            f"project's folder, or set {CONFIG_ENV}=/path/to/hosts.yaml"
        ) from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read config: {e.strerror}") from None
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        data = _hosts_sections(text) if hosts_only else None
        if data is None:
            raise _yaml_error(p, e) from None
    try:
        if hosts_only and isinstance(data, dict):
            return dataclasses.replace(
                parse_config(_hosts_alone(data), p.resolve()), hosts_only=True
            )
        return parse_config(data, p.resolve())
    except ConfigError as e:  # the file it is in: `recover.bogus_key: unknown key` named none
        raise ConfigError(f"{p}: {e}") from None


# what to do about it: the place is said; a parser's message is seldom the edit to make
YAML_FIX = ": fix the file there (an unclosed bracket or quote, a tab, an indent out of line)"


def _yaml_error(p: Path, e: yaml.YAMLError) -> ConfigError:
    if isinstance(e, yaml.MarkedYAMLError):
        mark, ctx = e.problem_mark, e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        # where it began too: an unclosed brace is found lines below the one that opened it
        began = (
            f" ({e.context} at line {ctx.line + 1}, column {ctx.column + 1})"
            if e.context and ctx and (not mark or ctx.line != mark.line)
            else ""
        )
        return ConfigError(f"{p}: YAML syntax error at {where}: {e.problem}{began}{YAML_FIX}")
    return ConfigError(f"{p}: YAML error: {e}{YAML_FIX}")


_TOP_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:")
_HOSTS_SECTIONS = ("hosts", "default_host", "defaults")


def _hosts_sections(text: str) -> dict | None:
    """The file's top-level host sections alone, where a syntax error elsewhere (a half-typed job)
    leaves the file unreadable whole: None where they do not read either."""
    kept, keep = [], False
    for line in text.splitlines():
        if m := _TOP_KEY.match(line):
            keep = m.group(1) in _HOSTS_SECTIONS
        if keep:
            kept.append(line)
    try:
        data = yaml.load("\n".join(kept), Loader=_Loader)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) and "hosts" in data else None


def _hosts_alone(data: dict) -> dict:
    hosts = data.get("hosts")
    if isinstance(hosts, dict):
        own = ("job", "server", "recover")
        hosts = {n: {k: v for k, v in (h or {}).items() if k not in own} for n, h in hosts.items()}
    stand_in = {"datasets": {"none": {"prompts": "none"}}}  # never sent: a stop sends no job
    kept = {k: data[k] for k in _HOSTS_SECTIONS if k != "hosts" and k in data}
    return dict(kept, hosts=hosts, job=stand_in)
