"""deploy and rollback: content-addressed releases, only changed files sent, atomic switch.

Two round trips for a change (plan, apply), one for a no-op. The host side is remote/host/release.py,
sent as `python -c` source so it works on a host that has no release yet.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from remote.common.answers import ReleaseApplied, ReleasePlan, RolledBack
from remote.common.jobspec import (
    DEPLOY_ABORT,
    JOB_FILE,
    UPLOAD_END,
    JobSpec,
    job_changes,
    settings_changed,
)
from remote.common.records import file_sha256
from remote.common.state import LineIds, moved_text
from remote.common.wire import from_wire

from ..config import Config
from ..connectors import Connector
from ..errors import ExitCode, RemoteError, UsageError

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "remote"
# the host side, sent as source: the draft copies' file first (release.py uses its names)
_RELEASE_SRC = "".join(
    (PACKAGE_DIR / "host" / f).read_text() for f in ("draft_copy.py", "release.py")
)


@dataclass(frozen=True)
class Release:
    id: str
    files: dict[str, bytes]  # path inside the release -> content
    manifest: dict[str, str]  # path -> sha256


@dataclass
class DraftSent:
    """A draft folder of this machine (hosts.yaml's server.draft.model) and its copy on the host."""

    written: str  # as hosts.yaml names it
    folder: str  # its copy on the host, relative to remote_dir
    files: int = 0  # the draft's files
    size: int = 0  # and their bytes
    sent: list[str] = field(default_factory=list)  # the files sent (new or changed)
    sent_bytes: int = 0
    removed: list[str] = field(default_factory=list)  # on the host, no longer in the draft
    # new or changed, and already on the host whole: sent by a deploy cut off before its switch
    resumed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.sent or self.removed or self.resumed)


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
    draft: DraftSent | None = None  # a draft folder of this machine, sent to the host
    job_changes: dict[str, tuple] = field(default_factory=dict)  # job.json: key -> (was, now)

    @property
    def changed(self) -> bool:
        files = self.added or self.modified or self.removed or self.prompts
        sent = self.draft is not None and self.draft.changed
        return bool(files) or sent or self.release != self.previous


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


def local_draft_files(folder: Path) -> dict[str, tuple[int, int, Path]]:
    """A draft folder's files (relative path -> size, mtime_ns, path), links followed; hidden ones
    (`.git`, `.cache`) left out."""
    out = {}
    for here, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            path = Path(here) / name
            if name.startswith(".") or not path.is_file():
                continue
            st = path.stat()
            out[path.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns, path)
    return out


def _draft_to_send(
    draft: DraftSent, local: dict, host: dict[str, list], pending: dict[str, list]
) -> dict[str, list]:
    """Each file of the draft as [size, mtime_ns, sha256], and (in `draft`) which to send: one
    whose size and time are those of a file of the host's copy (`host`: the version it reads
    from; `pending`: others a deploy cut off left) is that file (sent files keep their times
    there); another is read here. Sent: one the host has in neither, by sha256."""
    files = {}
    for rel, (size, mtime_ns, path) in sorted(local.items()):
        there, waiting = host.get(rel), pending.get(rel, [])
        known = ([there] if there else []) + waiting
        same = next((k for k in known if k[0] == size and k[1] == mtime_ns), None)
        files[rel] = [size, mtime_ns, same[2] if same else file_sha256(path)]
        if there and there[2] == files[rel][2]:
            continue
        if any(k[2] == files[rel][2] for k in waiting):
            draft.resumed.append(rel)
            continue
        draft.sent.append(rel)
        draft.sent_bytes += size
    draft.files, draft.size = len(files), sum(f[0] for f in files.values())
    draft.removed = sorted(rel for rel in host if rel not in local)
    return files


def _draft_sync(here, plan: ReleasePlan):
    """The draft folder of this machine against its copy on the host: what is said, the apply
    request's `draft` and the files to send, as (path in the draft, local file)."""
    if here is None:
        return None, None, []
    d = DraftSent(here.written, here.folder)
    local = local_draft_files(here.local)
    host, pending = plan.drafts.get(here.folder, {}), plan.drafts_pending.get(here.folder, {})
    files = _draft_to_send(d, local, host, pending)
    header = {"folder": here.folder, "files": files, "send": d.sent}
    return d, header, [(rel, local[rel][2]) for rel in d.sent]


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
    here = config.local_draft(conn.name)
    proc, plan = _session(conn, config, prompts, dry_run, here.folder if here else None)
    result = _compared(conn, config, rel, plan, prompts, dry_run)
    send_prompts = result.prompts
    # the host already has this exact release (e.g. after a rollback): only the switch is needed
    to_send = [] if rel.id in plan.releases else result.added + result.modified
    result.draft, draft_header, draft_paths = _draft_sync(here, plan)
    result.bytes_sent = sum(len(rel.files[p]) for p in to_send) + sum(
        prompts[p].stat().st_size for p in send_prompts
    )
    result.bytes_sent += result.draft.sent_bytes if result.draft else 0
    draft_changed = result.draft is not None and result.draft.changed
    moved = _moved_under_line_ids(config.job_for(conn.name), plan, prompts, send_prompts)
    if moved:  # every start would refuse it: said now, before the host has it
        _abort(proc)
        names, files = zip(*moved)
        raise UsageError(moved_text(list(names), list(files), "deployed"))
    apply = not dry_run and (rel.id != plan.current or bool(send_prompts) or draft_changed)
    if apply:
        header = {
            "id": rel.id,
            "files": rel.manifest,
            "base": plan.current,
            "prompts": send_prompts,
            "keep": conn.host.keep_releases,
        }
        if draft_changed:
            header["draft"] = draft_header
        release_files = [(f"release/{p}", rel.files[p]) for p in to_send]
        _send(proc, header, release_files, prompts, send_prompts, draft_paths)
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


def _compared(conn, config, rel: Release, plan, prompts: dict[str, Path], dry_run: bool):
    """What this deploy changes on the host: the release's files, the prompt files, the job, and
    what the records there say of it."""
    remote_files = plan.manifest
    result = DeployResult(host=conn.name, release=rel.id, previous=plan.current, dry_run=dry_run)
    result.added = sorted(p for p in rel.manifest if p not in remote_files)
    result.modified = sorted(
        p for p in rel.manifest if p in remote_files and remote_files[p] != rel.manifest[p]
    )
    result.removed = sorted(p for p in remote_files if p not in rel.manifest)
    result.prompts = sorted(
        p for p, local in prompts.items() if plan.prompts.get(p) != file_sha256(local)
    )
    running = plan.running_prompts
    result.settings_differ = _settings_differ(config.job_for(conn.name), plan.made_with)
    result.job_changes = job_changes(plan.job, json.loads(rel.files[JOB_FILE]))
    result.prompts_in_use = {p: running[p] for p in result.prompts if p in running}
    return result


def _moved_under_line_ids(job, plan, prompts: dict[str, Path], sending: list[str]) -> list:
    """(dataset, file) of each prompt file this deploy would replace under records that name its
    prompts by line number, where the new file does not begin with the one they were made from."""
    out = []
    for ds in job.datasets:
        kept = plan.line_ids.get(ds.name)
        if not kept or ds.prompts not in sending:
            continue
        local = prompts[ds.prompts]
        if not LineIds(**kept).begin(local):
            out.append((ds.name, ds.prompts))
    return out


def _abort(proc) -> None:
    """The session ended with nothing changed on the host."""
    proc.write((DEPLOY_ABORT + "\n").encode())
    proc.close_stdin()
    proc.finish()


def _settings_differ(job, made_with: dict[str, dict]) -> dict[str, dict[str, tuple]]:
    """Every dataset whose records were made with other settings than `job`'s, and what differs."""
    out = {}
    for ds in job.datasets:
        meta = made_with.get(ds.name)
        changed = settings_changed(meta, job.settings(ds)) if meta else {}
        if changed:
            out[ds.name] = changed
    return out


def _session(
    conn: Connector,
    config: Config,
    local: dict[str, Path],
    dry_run: bool = False,
    draft: str | None = None,
):
    """The helper started, and what the host has (ReleasePlan; `draft`: the copy on the host of a
    draft folder of this machine). Every dataset's prompt file must be beside hosts.yaml or on the
    host: else the runner would refuse at its start, so it is said now, before anything is sent."""
    job = config.job_for(conn.name)
    proc = conn.start(_helper_argv(conn, "session"))
    asked = sorted({f for ds in job.datasets for f in ds.files()})  # which the host has
    ask = {"prompts": asked, "datasets": job.dataset_names(), "dry_run": dry_run}
    ask["drafts"] = [draft] if draft else []
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
        _abort(proc)
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


class _Stream:
    """The helper's stdin as a file tarfile writes to: the upload goes as it is read, never spooled
    (a draft's files can be gigabytes)."""

    def __init__(self, proc) -> None:
        self.proc = proc

    def write(self, data) -> int:
        self.proc.write(bytes(data))
        return len(data)


def _send(
    proc, header: dict, release_files, prompts: dict, send_prompts: list[str], drafts=()
) -> None:
    """The apply request: one JSON line, then a tar of the changed files, prompt files and the
    draft's files to send (`drafts`: (path in the draft, local file))."""
    try:
        proc.write((json.dumps(header) + "\n").encode())
        _tar(proc, release_files, prompts, send_prompts, drafts)
    except BaseException:  # a file unreadable here: the host sees no end and switches nothing
        proc.close_stdin()  # (each draft file already placed whole stays)
        proc.finish()
        raise
    proc.close_stdin()


def _tar(proc, release_files, prompts: dict, send_prompts: list[str], drafts) -> None:
    with tarfile.open(fileobj=_Stream(proc), mode="w|") as tar:
        for name, data in release_files:
            _add(tar, name, data)
        for p in send_prompts:
            tar.add(str(prompts[p]), arcname=f"prompts/{p}", recursive=False)
        for rel, path in drafts:
            with open(path, "rb") as f:  # the file a link names, as the file itself
                info = tar.gettarinfo(arcname=f"draft/{rel}", fileobj=f)
                info.mode, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, "", ""
                tar.addfile(info, f)
        _add(tar, UPLOAD_END, b"")  # all of it sent: the host switches to nothing less


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)  # mtime 0, its default
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def rollback_host(conn: Connector, to: str | None = None) -> RolledBack:
    answer = release_helper(conn, "rollback", {"to": to} if to else {})
    out = from_wire(RolledBack, dict(answer, host=conn.name, settings_differ={}))
    try:  # said at the rollback that makes it so, not first at the restart it would refuse
        out.settings_differ = _settings_differ(JobSpec.from_dict(out.job), out.made_with)
    except (KeyError, ValueError):  # a job.json this deploytool cannot read: the restart says it
        pass
    return out
