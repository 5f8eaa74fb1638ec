"""The deployed job spec (job.json in a release) and the run's caps."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

JOB_FILE = "job.json"
JOB_TOKEN_ENV = "DEPLOYTOOL_JOB_TOKEN"  # the runner's token, inherited by anything it starts: stop finds them by it
SERVER_TOKEN_ENV = "DEPLOYTOOL_SERVER_TOKEN"  # the inference server's, likewise
RELEASE_MARKER = "MANIFEST.json"


@dataclass(frozen=True)
class Dataset:
    name: str
    prompts: str
    est_tokens: int


@dataclass(frozen=True)
class Job:
    datasets: tuple[Dataset, ...]
    engine: dict
    sampling: dict
    chat_template_kwargs: dict
    extra_body: dict = field(default_factory=dict)  # sent as-is with every request (vLLM's extras)
    notify: dict = field(default_factory=dict)  # job.notify: command, on, timeout

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Job":
        with open(path) as f:
            raw = json.load(f)
        ds = tuple(
            Dataset(name=k, prompts=v["prompts"], est_tokens=int(v.get("est_tokens", 2000)))
            for k, v in raw["datasets"].items()
        )
        return cls(
            ds,
            dict(raw.get("engine", {})),
            dict(raw.get("sampling", {})),
            dict(raw.get("chat_template_kwargs", {})),
            dict(raw.get("extra_body") or {}),
            dict(raw.get("notify") or {}),
        )

    def names(self) -> list[str]:
        return [d.name for d in self.datasets]


@dataclass
class Caps:
    """What to run: targets are the first N prompts of each dataset (None = all)."""

    max_samples: int | None = None
    caps: dict[str, int] = field(default_factory=dict)
    max_tokens: int | None = None
    datasets: list[str] | None = None  # None = every dataset of the job

    def target(self, name: str) -> int | None:
        return self.caps.get(name, self.max_samples)

    def selected(self, name: str) -> bool:
        return self.datasets is None or name in self.datasets

    def to_dict(self) -> dict:
        return {
            "max_samples": self.max_samples,
            "caps": dict(self.caps),
            "max_tokens": self.max_tokens,
            "datasets": self.datasets,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Caps":
        return cls(
            d.get("max_samples"), dict(d.get("caps") or {}), d.get("max_tokens"), d.get("datasets")
        )


def base_urls(engine: dict) -> list[str]:
    """`base_urls`, else `base_url` as a list of one."""
    urls = engine.get("base_urls") or [engine.get("base_url") or "http://127.0.0.1:8000/v1"]
    return [u.rstrip("/") for u in urls]


def release_dir() -> Path:
    """The release this code runs from (the folder holding the `remote` package)."""
    return Path(__file__).resolve().parent.parent.parent


def default_root() -> Path:
    """<remote_dir> for a deployed release: <remote_dir>/releases/<id>/remote/ -> <remote_dir>."""
    rel = release_dir()
    if rel.parent.name == "releases":
        return rel.parent.parent
    return Path.cwd()


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def outputs(self) -> Path:
        return self.root / "data" / "outputs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def status(self) -> Path:
        return self.run / "status.json"

    @property
    def pidfile(self) -> Path:
        return self.run / "runner.pid"

    @property
    def lock(self) -> Path:
        return self.run / "runner.lock"

    @property
    def control(self) -> Path:
        return self.run / "control.json"

    @property
    def log(self) -> Path:
        return self.logs / "runner.log"

    @property
    def server_pid(self) -> Path:
        return self.run / "server.pid"

    @property
    def server_log(self) -> Path:
        return self.logs / "server.log"

    def output(self, ds: str) -> Path:
        return self.outputs / f"{ds}.jsonl"

    def errors(self, ds: str) -> Path:
        return self.outputs / f"{ds}.errors.jsonl"

    def meta(self, ds: str) -> Path:
        return self.outputs / f"{ds}.meta.json"

    def ensure(self) -> None:
        for d in (self.outputs, self.run, self.logs):
            d.mkdir(parents=True, exist_ok=True)


def write_json_atomic(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
