"""The long-lived vLLM OpenAI-compatible server: `python -m remote server start|check|smoke|stop|status`.

Started detached like the runner (own session, pid file with start time and a token, log in
logs/server.log), so a job restart never reloads the weights. Readiness is polled by the caller with
`check`, which watches the process too. Answers are one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path

from ..common import metrics, nvsmi, procinfo
from ..common.jobspec import SERVER_TOKEN_ENV, Paths, default_root, release_dir, write_json_atomic
from . import engines, gpu, intent, kill

_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


class ServerError(Exception):
    def __init__(self, message: str, **extra):
        super().__init__(message)
        self.extra = extra


def managed(paths: Paths) -> dict | None:
    return procinfo.live_record(paths.server_pid)


def resolve_command(spec: dict) -> str:
    if spec.get("command"):
        cmd = os.path.expanduser(spec["command"])
        found = shutil.which(cmd)
        if not found:
            raise ServerError(f"server.command {spec['command']!r} not found on the host")
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


def build_argv(spec: dict) -> list[str]:
    return [
        resolve_command(spec),
        "serve",
        spec["model"],
        "--port",
        str(spec["port"]),
        *spec.get("args", []),
    ]


def masked(env: dict) -> dict:
    return {k: ("****" if _SECRET.search(k) else v) for k, v in env.items()}


def get_url(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(HTTP status, body) of a GET; status 0 when nothing answered."""
    import urllib.error
    import urllib.request  # here: `ctl status` imports this module and never needs it

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, ""


def start(paths: Paths, spec: dict) -> dict:
    rec = managed(paths)
    if rec:
        return {"already": True, "pid": rec["pid"], "port": rec["port"], "model": rec["model"]}
    # a second engine beside them is CUDA out of memory at load
    removed = engines.remove_leftovers(paths)
    port = int(spec["port"])
    headless = bool(spec.get("headless"))
    holders = set() if headless else gpu.listener_pids(port)  # a headless worker serves no HTTP
    if holders:
        names = ", ".join(f"pid {p} ({engines.title(p)})" for p in sorted(holders))
        raise ServerError(
            f"port {port} is already in use by {names}: stop it or change server.port"
        )
    argv = build_argv(spec)
    token = secrets.token_hex(12)
    env = dict(os.environ, **spec.get("env", {}), **{SERVER_TOKEN_ENV: token})
    paths.ensure()
    with open(paths.server_log, "ab") as log:
        log.write(
            f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode()
        )
        log.flush()
        proc = procinfo.start_detached(argv, cwd=paths.root, env=env, log=log)
    write_json_atomic(
        paths.server_pid,
        {
            "pid": proc.pid,
            "sid": proc.pid,  # start_detached: a session of its own, which its engine processes keep
            "start_time": procinfo.start_time(proc.pid),
            "token": token,
            "port": port,
            "model": spec["model"],
            "argv": argv,
            "env": masked(spec.get("env", {})),
            "started_at": time.time(),
            "release": str(release_dir()),
            "headless": headless,
            "by": spec.get("by", "user"),  # the watcher's own starts count against its budget
        },
    )
    return {
        "already": False,
        "pid": proc.pid,
        "port": port,
        "model": spec["model"],
        "argv": argv,
        "env": masked(spec.get("env", {})),
        "removed": removed,
    }


def check(paths: Paths) -> dict:
    """One look: is the server alive, is it ready (GET /v1/models), the log's last lines."""
    rec = procinfo.read_json(paths.server_pid)
    if not rec:
        return {
            "alive": False,
            "ready": False,
            "started": False,
            "log": procinfo.tail_lines(paths.server_log, 30),
        }
    alive = procinfo.is_same_process(rec)
    elapsed = time.time() - rec.get("started_at", time.time())
    if rec.get(
        "headless"
    ):  # no HTTP to ask: alive is all there is (the caller waits a few seconds)
        if alive:
            engines.watch(paths, rec)
        return {
            "alive": alive,
            "ready": alive,
            "started": True,
            "pid": rec["pid"],
            "port": rec["port"],
            "models": [],
            "headless": True,
            "elapsed_s": elapsed,
            "log": procinfo.tail_lines(paths.server_log, 30 if not alive else 1),
        }
    code, models = served_models(rec["port"]) if alive else (0, [])
    if alive and code == 200:  # ready: start-up's passing children are gone, its engines are up
        rec = engines.watch(paths, rec)
        if not rec.get("ready_at"):  # from now on a wedge counts (loading never does)
            write_json_atomic(paths.server_pid, dict(rec, ready_at=time.time()))
    return {
        "alive": alive,
        "ready": alive and code == 200,
        "started": True,
        "pid": rec["pid"],
        "port": rec["port"],
        "models": models,
        "elapsed_s": elapsed,
        "log": procinfo.tail_lines(paths.server_log, 30 if not alive else 1),
    }


def allowed_pids(paths: Paths, engine_port: int | None) -> set[int]:
    """Who may hold GPU memory: the managed server's processes (its token, its session: renamed engine
    processes carry no token) and whoever serves the engine's port, with all their descendants."""
    allowed: set[int] = set()
    rec = managed(paths)
    if rec:
        if rec.get("token"):
            allowed |= set(kill.token_holders(SERVER_TOKEN_ENV, rec["token"]))
        allowed |= set(procinfo.session_members(rec.get("sid", rec["pid"]), rec["start_time"]))
        allowed.add(rec["pid"])
    listeners = gpu.listener_pids(engine_port) if engine_port else set()
    return procinfo.descendants(listeners | allowed)


def served_models(port: int) -> tuple[int, list[str]]:
    """(HTTP status, model ids) of GET /v1/models: what requests must name (--served-model-name)."""
    code, body = get_url(f"http://127.0.0.1:{port}/v1/models", timeout=3)
    try:
        data = json.loads(body).get("data", []) if code == 200 else []
        return code, [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, AttributeError):
        return code, []


def _mark_stopped(paths: Paths) -> None:
    """A stopped server is not a dead one: status says `died` only when nobody stopped it."""
    rec = procinfo.read_json(paths.server_pid)
    if rec and "stopped_at" not in rec:
        write_json_atomic(paths.server_pid, dict(rec, stopped_at=time.time()))


def stop(paths: Paths, grace: float, gpu_wait: float = 120.0) -> dict:
    rec = managed(paths)
    _mark_stopped(paths)
    if not rec:
        removed = engines.remove_leftovers(paths, grace)
        held = wait_gpu_free({p["pid"] for p in removed}, gpu_wait) if removed else None
        return {"was_running": False, "killed": [], "gpu": held, "removed": removed}
    token = rec.get("token")
    tree = engines.processes(rec)
    tree[rec["pid"]] = rec["start_time"]
    killed = kill.terminate({rec["pid"]: rec["start_time"]}, grace, SERVER_TOKEN_ENV, token)
    rest = {p: st for p, st in tree.items() if p != rec["pid"] and procinfo.start_time(p) == st}
    killed += kill.terminate(rest, min(grace, 10.0)) if rest else []  # already sent SIGTERM
    left = kill.wait_gone(tree, 5)
    held = wait_gpu_free(set(tree), gpu_wait)
    return {
        "was_running": True,
        "pid": rec["pid"],
        "killed": sorted(set(killed)),
        "alive": left,
        "gpu": held,
        "removed": [],
    }


def wait_gpu_free(pids: set[int], timeout: float) -> dict | None:
    """Wait until none of `pids` holds GPU memory (vLLM workers free it slowly). None: no nvidia-smi."""
    deadline = time.monotonic() + timeout
    while True:
        apps = nvsmi.compute_apps()
        if apps is None:
            return None
        holding = [a for a in apps if a["pid"] in pids]
        if not holding or time.monotonic() >= deadline:
            return {"free": not holding, "still_held_by": holding}
        time.sleep(0.5)


def _metrics(port: int) -> dict:
    code, text = get_url(f"http://127.0.0.1:{port}/metrics", timeout=3)
    return metrics.snapshot(text) if code == 200 else {}


def status(paths: Paths) -> dict:
    rec = managed(paths)
    if not rec:
        last = procinfo.read_json(paths.server_pid)
        died = bool(last) and "stopped_at" not in last  # not stopped by us: it died
        return {
            "up": False,
            "leftovers": engines.leftovers(paths),
            "died": died,
            "engines_gone": engines.gone(last) if died else [],
        }
    c = check(paths)  # records engine processes seen for the first time
    rec = procinfo.read_json(paths.server_pid) or rec
    out = {
        "up": True,
        "ready": c["ready"],
        "pid": rec["pid"],
        "port": rec["port"],
        "model": rec["model"],
        "uptime_s": time.time() - rec["started_at"],
        "metrics": None,
        "headless": bool(rec.get("headless")),
        "engines_gone": engines.gone(rec),
    }
    if out["headless"]:
        return out
    m1 = _metrics(rec["port"])
    if any(v is not None for v in m1.values()):
        t1 = time.monotonic()
        time.sleep(1.0)
        m2 = _metrics(rec["port"])
        g1, g2 = m1["generation_tokens"], m2.get("generation_tokens")
        rate = (g2 - g1) / (time.monotonic() - t1) if g1 is not None and g2 is not None else None
        out["metrics"] = {  # the fields of ServerMetrics
            "running": m2.get("running"),
            "waiting": m2.get("waiting"),
            "kv_cache": m2.get("kv_cache"),
            "generation_tokens_per_s": rate,
        }
    return out


def add_parser(sub) -> None:
    p = sub.add_parser(
        "server", help="the vLLM server: start, check, smoke, stop, status (JSON on stdout)"
    )
    p.add_argument("server_command", choices=["start", "check", "smoke", "stop", "status"])
    p.add_argument("--spec", default="{}", help="JSON of hosts.yaml `server:`")
    p.add_argument("--grace", type=float, default=30.0)
    p.add_argument("--gpu-wait", type=float, default=120.0)
    p.add_argument("--recover", help="JSON of hosts.yaml `recover:` (the watcher's settings)")
    p.add_argument("--root", type=Path)
    p.set_defaults(func=main)


def _command(paths: Paths, a: argparse.Namespace, spec: dict) -> dict:
    if a.server_command == "check":
        return check(paths)
    if a.server_command == "smoke":
        from .smoke import smoke

        return smoke(paths, spec.get("model", "default"))
    if a.server_command == "status":
        return status(paths)
    from . import supervised

    with intent.locked(paths):  # the watcher acts between commands, never during one
        if a.server_command == "start":
            out = start(paths, spec)
            recover = supervised.recover_arg(a)
            intent.change(paths, recover=recover, server={"wanted": True, "spec": spec})
        elif a.server_command == "stop":  # said before anything is signalled: nothing comes back
            intent.change(paths, server={"wanted": False, "why": "stopped"})
            out = stop(paths, a.grace, a.gpu_wait)
        else:
            raise ServerError(f"unknown server command {a.server_command!r}")
    out["watcher"] = supervised.after(paths)
    return out


def main(a: argparse.Namespace) -> int:
    paths = Paths((a.root or default_root()).expanduser().resolve())
    try:
        out = _command(paths, a, json.loads(a.spec))
        print(json.dumps({"ok": True, **out}))
        return 0
    except ServerError as e:
        print(json.dumps({"ok": False, "error": str(e), **e.extra}))
        return 1
