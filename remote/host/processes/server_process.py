"""The long-lived vLLM OpenAI-compatible server as a process: start, check, stop, status. What the
`server` commands (server_commands) and the watcher both use; it records no intent.

Started detached like the runner (own session, pid file with start time and a token, log in
logs/server.log), so a job restart never reloads the weights.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path

from ...common import machine, metrics, procinfo
from ...common.answers import (
    GpuApp,
    GpuFreed,
    ServerChecked,
    ServerStarted,
    ServerState,
    ServerStopped,
)
from ...common.jobspec import (
    LOOPBACK,
    SERVER_TOKEN_ENV,
    Paths,
    ServerSpec,
    extracts,
    flag_value,
    masked_args,
    release_dir,
)
from ...common.protocol import ServerCheck, ServerStatus, ServerStop
from ...common.state import ServerRecord, Supervise
from ...common.wire import HostFault
from ..facts import engines, gpu, kill

CHECK_EVERY_S = 0.25  # a waiting check looks this often: a start's readiness seen within it
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


class ServerError(HostFault):
    def __init__(self, message: str, *, fix: str = "", log=()):
        super().__init__("server", message, fix=fix, log=log)


def managed(paths: Paths) -> ServerRecord | None:
    """The pid file's server if that process is still the one that wrote it."""
    return ServerRecord.live(paths.server_pid)


def resolve_command(spec: ServerSpec) -> str:
    if spec.command:
        found = shutil.which(os.path.expanduser(spec.command))
        if not found:
            raise ServerError(f"server.command {spec.command!r} not found on the host")
        return found
    beside = Path(sys.executable).parent / "vllm"  # the vllm of the venv whose python runs us
    if beside.exists():
        return str(beside)
    found = shutil.which("vllm")
    if not found:
        raise ServerError(
            f"no `vllm` beside {sys.executable} or on PATH: install vLLM there or set server.command"
        )
    return found


def build_argv(spec: ServerSpec) -> list[str]:
    """vLLM's command line; on loopback unless its args give --host (a --headless rank serves no
    HTTP, so it has nothing to bind)."""
    where = [] if spec.headless or flag_value(spec.args, "--host") else ["--host", LOOPBACK]
    cmd = [resolve_command(spec), "serve", spec.model, "--port", str(spec.port)]
    return [*cmd, *where, *spec.args]


def masked(env: dict) -> dict:
    return {k: ("****" if _SECRET.search(k) else v) for k, v in env.items()}


def server_key(paths: Paths) -> str | None:
    """The key the managed server asks of every /v1 request (its settings are in supervise.json,
    its owner's only; the pid file holds them masked)."""
    want = Supervise.read(paths.supervise)
    return want.server.spec.api_key if want is not None else None


def auth(key: str | None) -> dict:
    return {"Authorization": f"Bearer {key}"} if key else {}


def get_url(url: str, timeout: float = 5.0, key: str | None = None) -> tuple[int, str]:
    """(HTTP status, body) of a GET; status 0 when nothing answered."""
    import urllib.error
    import urllib.request  # here: `ctl status` imports this module and never needs it

    try:
        req = urllib.request.Request(url, headers=auth(key))
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, ""


def refuse_unstartable(spec: ServerSpec) -> None:
    """What would refuse the server's start, refused before anything is stopped for it (a dry run
    included): no vLLM to run, or listening beyond loopback with no key."""
    resolve_command(spec)
    exposed = spec.exposure_problem()
    if exposed:
        raise ServerError(f"vLLM {exposed}", fix="set server.env.VLLM_API_KEY, or drop --host")


def start(paths: Paths, spec: ServerSpec, by: str = "user") -> ServerStarted:
    """Start it detached; `by` the watcher: its own starts count against its budget."""
    rec = managed(paths)
    if rec:
        up_s = time.time() - rec.started_at if rec.started_at else None
        return ServerStarted(
            already=True, by=rec.by, up_s=up_s, pid=rec.pid, port=rec.port, model=rec.model
        )
    refuse_unstartable(spec)  # hosts.yaml's check says so first; this holds for any caller
    # a second engine beside them is CUDA out of memory at load
    removed = engines.remove_leftovers(paths)
    port, headless = spec.port, spec.headless
    holders = set() if headless else gpu.listener_pids(port)  # a headless worker serves no HTTP
    if holders:
        names = ", ".join(f"pid {p} ({engines.title(p)})" for p in sorted(holders))
        raise ServerError(
            f"port {port} is already in use by {names}", fix="stop it or change server.port"
        )
    argv = build_argv(spec)
    shown = masked_args(argv)  # what the log, the pid file and the answer say
    token = secrets.token_hex(12)
    env = dict(os.environ, **spec.env, **{SERVER_TOKEN_ENV: token})
    paths.ensure()
    with open(paths.server_log, "ab") as log:
        log.write(
            f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(shown)}\n".encode()
        )
        log.flush()
        proc = procinfo.start_detached(argv, cwd=paths.root, env=env, log=log)
    ServerRecord(
        pid=proc.pid,
        sid=proc.pid,  # start_detached: a session of its own, which its engine processes keep
        start_time=procinfo.start_time(proc.pid),
        token=token,
        port=port,
        model=spec.model,
        argv=shown,
        env=masked(spec.env),
        started_at=time.time(),
        release=str(release_dir()),
        headless=headless,
        by=by,
    ).write(paths.server_pid)
    return ServerStarted(
        already=False,
        pid=proc.pid,
        port=port,
        model=spec.model,
        argv=shown,
        env=masked(spec.env),
        removed=removed,
    )


def check(
    paths: Paths, req: ServerCheck | None = None, clock=time.monotonic, sleep=time.sleep
) -> ServerChecked:
    """Is the server alive, is it ready (GET /v1/models), the log's last lines. With `wait_s`, a
    loading server is looked at again until it answers, dies, or wait_s has passed: a look every
    CHECK_EVERY_S here is cheap where each look asked over SSH is a command on the host."""
    deadline = clock() + (req.wait_s if req is not None else 0.0)
    while True:
        look = _look(paths)
        if look.ready or not look.alive or look.headless or clock() >= deadline:
            break
        sleep(CHECK_EVERY_S)
    # the log of the look answered with, read once: a dead or absent server's last lines say why
    look.log = procinfo.tail_lines(paths.server_log, 1 if look.alive else 30)
    return look


def _look(paths: Paths) -> ServerChecked:
    """The process and GET /v1/models, without the log."""
    rec = ServerRecord.read(paths.server_pid)
    if rec is None:
        return ServerChecked()
    alive = rec.alive()
    if rec.headless:  # no HTTP to ask: alive is all there is (the caller waits a few seconds)
        ready, models = alive, []
        if alive:
            engines.watch(paths, rec)
    else:
        code, models = served_models(rec.port, server_key(paths)) if alive else (0, [])
        ready = alive and code == 200
        if ready:  # start-up's passing children are gone, its engines are up
            rec = engines.watch(paths, rec)
            if not rec.ready_at:  # from now on a wedge counts (loading never does)
                rec.ready_at = time.time()
                rec.write(paths.server_pid)
    return ServerChecked(
        alive=alive,
        ready=ready,
        started=True,
        pid=rec.pid,
        port=rec.port,
        models=models,
        headless=rec.headless,
        elapsed_s=time.time() - (rec.started_at or time.time()),
    )


def allowed_pids(paths: Paths, engine_port: int | None) -> set[int]:
    """Who may hold GPU memory: the managed server's processes (its token, its session: renamed engine
    processes carry no token) and whoever serves the engine's port, with all their descendants."""
    rec = managed(paths)
    allowed = {rec.pid, *engines.processes(rec)} if rec else set()
    listeners = gpu.listener_pids(engine_port) if engine_port else set()
    return procinfo.descendants(listeners | allowed)


def served_models(port: int, key: str | None = None) -> tuple[int, list[str]]:
    """(HTTP status, model ids) of GET /v1/models: what requests must name (--served-model-name)."""
    code, body = get_url(f"http://127.0.0.1:{port}/v1/models", timeout=3, key=key)
    try:
        data = json.loads(body).get("data", []) if code == 200 else []
        return code, [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, AttributeError):
        return code, []


def _mark_stopped(paths: Paths) -> None:
    """A stopped server is not a dead one: status says `died` only when nobody stopped it."""
    rec = ServerRecord.read(paths.server_pid)
    if rec is not None and rec.stopped_at is None:
        rec.stopped_at = time.time()
        rec.write(paths.server_pid)


def stop(paths: Paths, req: ServerStop) -> ServerStopped:
    grace, gpu_wait = req.grace, req.gpu_wait
    rec = managed(paths)
    _mark_stopped(paths)
    if not rec:
        removed = engines.remove_leftovers(paths, grace)
        held = wait_gpu_free({p.pid for p in removed}, gpu_wait) if removed else None
        return ServerStopped(was_running=False, gpu=held, removed=removed)
    tree = engines.processes(rec)
    tree[rec.pid] = rec.start_time
    killed = kill.terminate({rec.pid: rec.start_time}, grace, SERVER_TOKEN_ENV, rec.token)
    rest = {p: st for p, st in tree.items() if p != rec.pid and procinfo.start_time(p) == st}
    killed += kill.terminate(rest, min(grace, 10.0)) if rest else []  # already sent SIGTERM
    left = kill.wait_gone(tree, 5)
    held = wait_gpu_free(set(tree), gpu_wait)
    return ServerStopped(
        was_running=True, pid=rec.pid, killed=sorted(set(killed)), alive=left, gpu=held
    )


def wait_gpu_free(pids: set[int], timeout: float) -> GpuFreed | None:
    """Wait until none of `pids` holds GPU memory (vLLM workers free it slowly). None: no nvidia-smi."""
    deadline = time.monotonic() + timeout
    while True:
        apps = machine.compute_apps()
        if apps is None:
            return None
        holding = [a for a in apps if a["pid"] in pids]
        if not holding or time.monotonic() >= deadline:
            held = [GpuApp(a["pid"], a["used_mib"]) for a in holding]
            return GpuFreed(free=not holding, still_held_by=held)
        time.sleep(0.5)


def _metrics(port: int) -> dict:
    code, text = get_url(f"http://127.0.0.1:{port}/metrics", timeout=3)
    return metrics.snapshot(text) if code == 200 else {}


def server_state(paths: Paths, req: ServerStatus | None = None) -> ServerState:
    rec = managed(paths)
    if not rec:
        last = ServerRecord.read(paths.server_pid)
        died = last is not None and last.stopped_at is None  # not stopped by us: it died
        return ServerState(
            up=False,
            leftovers=engines.leftovers(paths),
            died=died,
            engines_gone=engines.gone(last) if died else [],
        )
    c = check(paths)  # records engine processes seen for the first time
    rec = ServerRecord.read(paths.server_pid) or rec
    out = ServerState(
        up=True,
        ready=c.ready,
        pid=rec.pid,
        port=rec.port,
        model=rec.model,
        uptime_s=time.time() - rec.started_at,
        headless=rec.headless,
        engines_gone=engines.gone(rec),
        extracts=extracts(rec.argv),
        speculative=flag_value(rec.argv, "--speculative-config"),
    )
    if out.headless or (req is not None and req.quick):
        return out
    m1 = _metrics(rec.port)
    if any(v is not None for v in m1.values()):
        t1 = time.monotonic()
        time.sleep(1.0)
        m2 = _metrics(rec.port)
        if m2:
            out.metrics = metrics.between(m2, time.monotonic(), (t1, m1), None)
    return out
