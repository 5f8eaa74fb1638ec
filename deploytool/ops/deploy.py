"""deploy and rollback: content-addressed releases, only changed files sent, atomic switch.

Two round trips for a change (plan, apply), one for a no-op. The host side is remote/host/release.py,
sent as `python -c` source so it works on a host that has no release yet.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from remote.common.answers import ReleaseApplied, ReleasePlan, RolledBack
from remote.common.jobspec import JOB_FILE, settings_changed
from remote.common.records import file_sha256
from remote.common.wire import from_wire

from ..config import Config
from ..connectors import Connector
from ..errors import ExitCode, RemoteError, UsageError

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "remote"
_RELEASE_SRC = (PACKAGE_DIR / "host" / "release.py").read_text()


@dataclass(frozen=True)
class Release:
    id: str
    files: dict[str, bytes]  # path inside the release -> content
    manifest: dict[str, str]  # path -> sha256


@dataclass
class DeployResult:
    host: str
    release: str
    previous: str | None
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    seconds: float = 0.0
    dry_run: bool = False
    pruned: list[str] = field(default_factory=list)
    round_trips: int = 0
    # prompt file replaced -> pid of the runner using it
    prompts_in_use: dict[str, int] = field(default_factory=dict)
    # dataset -> {setting: (then, now)}: its records were made with other settings than the
    # deployed job's (a restart is refused until they agree, or --force mixes them)
    settings_differ: dict[str, dict[str, tuple]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        files = self.added or self.modified or self.removed or self.prompts
        return bool(files) or self.release != self.previous


def build_release(
    config: Config, package_dir: Path = PACKAGE_DIR, host: str | None = None
) -> Release:
    """remote/ (sources only) + job.json from hosts.yaml (with `host`'s own overrides); the id is the hash
    of the manifest."""
    files: dict[str, bytes] = {}
    for path in sorted(package_dir.rglob("*")):
        source = path.suffix in (".py", ".json", ".txt") and "__pycache__" not in path.parts
        if source and path.is_file():
            files[f"remote/{path.relative_to(package_dir).as_posix()}"] = path.read_bytes()
    job = config.job_for(host) if host else config.job
    files[JOB_FILE] = job.file_bytes()
    manifest = {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}
    rid = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:12]
    return Release(rid, files, manifest)


def local_prompts(config: Config) -> dict[str, Path]:
    """Prompt files of the job that exist beside hosts.yaml (relative path on the host -> local file)."""
    files = (rel for ds in config.job.datasets for rel in ds.files())
    return {rel: config.base_dir / rel for rel in files if (config.base_dir / rel).is_file()}


def release_helper(conn: Connector, cmd: str, args: dict, stdin=None) -> dict:
    res = conn.run(_helper_argv(conn, cmd, json.dumps(args)), stdin=stdin)
    if not res.ok:
        raise _helper_error(conn, cmd, res)
    try:
        return res.answer()
    except ValueError:
        raise RemoteError(f"{cmd}: unexpected answer from the host: {res.out[:200]!r}") from None


def _read(cls, text: str):
    try:
        return from_wire(cls, json.loads(text))
    except ValueError as e:  # ProtocolError too: a host helper of another deploytool
        raise RemoteError(
            f"deploy: unexpected answer from the host ({e}): {text[:200]!r}"
        ) from None


def _helper_argv(conn: Connector, cmd: str, *args: str) -> list[str]:
    # -S: the helper needs only the standard library, and skipping site saves a third of start-up
    return conn.python("-S", "-c", _RELEASE_SRC, cmd, conn.remote_dir, *args)


def _helper_error(conn: Connector, cmd: str, res) -> RemoteError:
    detail = res.why().removeprefix("error: ")
    if res.exit_code == 127:
        detail = f"{conn.host.python} not found on the host (set `python` in hosts.yaml)"
    code = ExitCode.BAD_INPUT if res.exit_code == ExitCode.BAD_INPUT else None  # a name it lacks
    return RemoteError(f"{cmd} failed: {detail}", code)


def deploy_host(
    conn: Connector, config: Config, *, dry_run: bool = False, release: Release | None = None
) -> DeployResult:
    """One SSH session: ask the host what it has, then (if anything changed) send only that."""
    t0 = time.monotonic()
    rel = release or build_release(config, host=conn.name)
    prompts = local_prompts(config)
    proc, plan = _session(conn, config, prompts, dry_run)
    remote_files = plan.manifest
    result = DeployResult(host=conn.name, release=rel.id, previous=plan.current, dry_run=dry_run)
    result.added = sorted(p for p in rel.manifest if p not in remote_files)
    result.modified = sorted(
        p for p in rel.manifest if p in remote_files and remote_files[p] != rel.manifest[p]
    )
    result.removed = sorted(p for p in remote_files if p not in rel.manifest)
    result.prompts = send_prompts = sorted(
        p for p, local in prompts.items() if plan.prompts.get(p) != file_sha256(local)
    )
    running = plan.running_prompts
    result.settings_differ = _settings_differ(config.job_for(conn.name), plan.made_with)
    result.prompts_in_use = {p: running[p] for p in send_prompts if p in running}
    # the host already has this exact release (e.g. after a rollback): only the switch is needed
    to_send = [] if rel.id in plan.releases else result.added + result.modified
    result.bytes_sent = sum(len(rel.files[p]) for p in to_send) + sum(
        prompts[p].stat().st_size for p in send_prompts
    )
    apply = not dry_run and (rel.id != plan.current or bool(send_prompts))
    if apply:
        header = {
            "id": rel.id,
            "files": rel.manifest,
            "base": plan.current,
            "prompts": send_prompts,
            "keep": conn.host.keep_releases,
        }
        _send(
            proc, header, [(f"release/{p}", rel.files[p]) for p in to_send], prompts, send_prompts
        )
    else:
        proc.close_stdin()
    res = proc.finish()
    if not res.ok:
        raise _helper_error(conn, "deploy", res)
    if apply:
        result.pruned = _read(ReleaseApplied, res.last_line()).pruned
    elif not dry_run:
        result.bytes_sent = 0
    result.seconds = time.monotonic() - t0
    result.round_trips = conn.round_trips
    return result


def _settings_differ(job, made_with: dict[str, dict]) -> dict[str, dict[str, tuple]]:
    """Every dataset whose records were made with other settings than `job`'s, and what differs."""
    out = {}
    for ds in job.datasets:
        meta = made_with.get(ds.name)
        changed = settings_changed(meta, job.settings(ds)) if meta else {}
        if changed:
            out[ds.name] = changed
    return out


def _session(conn: Connector, config: Config, local: dict[str, Path], dry_run: bool = False):
    """The helper started, and what the host has (ReleasePlan). Every dataset's prompt file must be
    beside hosts.yaml or on the host: else the runner would refuse at its start, so it is said now,
    before anything is sent."""
    job = config.job_for(conn.name)
    proc = conn.start(_helper_argv(conn, "session"))
    asked = sorted({f for ds in job.datasets for f in ds.files()})  # which the host has
    ask = {"prompts": asked, "datasets": job.dataset_names(), "dry_run": dry_run}
    proc.write((json.dumps(ask) + "\n").encode())
    line = proc.readline()
    if not line.strip():
        raise _helper_error(conn, "deploy", proc.finish())
    plan = _read(ReleasePlan, line)
    missing = [
        (d, f)
        for d in job.datasets
        for f in d.files()
        if f not in local and plan.prompts.get(f) is None
    ]
    if missing:
        proc.close_stdin()
        proc.finish()
        raise _nowhere_error(conn, config, missing)
    return proc, plan


def _nowhere_error(conn: Connector, config: Config, missing: list) -> UsageError:
    """A dataset's prompt file is neither beside hosts.yaml nor on the host."""
    ds, f = missing[0]
    key = "prompts" if f == ds.prompts else "eval_prompts"
    more = f" ({len(missing) - 1} more file(s) likewise)" if len(missing) > 1 else ""
    return UsageError(
        f"job.datasets.{ds.name}.{key}: {f} is neither beside hosts.yaml "
        f"({config.base_dir / f}) nor on {conn.name} (in {conn.remote_dir}): fix the "
        f"path in hosts.yaml, or put the file there; nothing was deployed{more}"
    )


def _send(proc, header: dict, release_files, prompts: dict, send_prompts: list[str]) -> None:
    """The apply request: one JSON line, then a tar of the changed files and prompt files."""
    with tempfile.TemporaryFile() as payload:  # spooled to disk: prompt files can be gigabytes
        with tarfile.open(fileobj=payload, mode="w") as tar:
            for name, data in release_files:
                _add(tar, name, data)
            for p in send_prompts:
                tar.add(str(prompts[p]), arcname=f"prompts/{p}", recursive=False)
        payload.seek(0)
        proc.write((json.dumps(header) + "\n").encode())
        for chunk in iter(lambda: payload.read(1 << 20), b""):
            proc.write(chunk)
    proc.close_stdin()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)  # mtime 0, its default
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def rollback_host(conn: Connector, to: str | None = None) -> RolledBack:
    out = release_helper(conn, "rollback", {"to": to} if to else {})
    return from_wire(RolledBack, dict(out, host=conn.name))
