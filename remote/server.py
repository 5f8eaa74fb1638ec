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

from . import gpu, kill, metrics, procinfo
from .jobspec import Paths, default_root, write_json_atomic

TOKEN_ENV = "DEPLOYTOOL_SERVER_TOKEN"
_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


class ServerError(Exception):
    def __init__(self, message: str, **extra):
        super().__init__(message)
        self.extra = extra


def pidfile(paths: Paths) -> Path:
    return paths.run / "server.pid"


def logfile(paths: Paths) -> Path:
    return paths.logs / "server.log"


def managed(paths: Paths) -> dict | None:
    return procinfo.live_record(pidfile(paths))


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


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
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
    port = int(spec["port"])
    headless = bool(spec.get("headless"))
    holders = set() if headless else gpu._listener_pids(port)  # a headless worker serves no HTTP
    if holders:
        names = ", ".join(
            f"pid {p} ({' '.join(procinfo.cmdline(p))[:80]})" for p in sorted(holders)
        )
        raise ServerError(
            f"port {port} is already in use by {names}: stop it or change server.port"
        )
    argv = build_argv(spec)
    token = secrets.token_hex(12)
    env = dict(os.environ, **spec.get("env", {}), **{TOKEN_ENV: token})
    paths.ensure()
    with open(logfile(paths), "ab") as log:
        log.write(
            f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode()
        )
        log.flush()
        proc = procinfo.start_detached(argv, cwd=paths.root, env=env, log=log)
    from .jobspec import release_dir

    write_json_atomic(
        pidfile(paths),
        {
            "pid": proc.pid,
            "start_time": procinfo.start_time(proc.pid),
            "token": token,
            "port": port,
            "model": spec["model"],
            "argv": argv,
            "env": masked(spec.get("env", {})),
            "started_at": time.time(),
            "release": str(release_dir()),
            "headless": headless,
        },
    )
    return {
        "already": False,
        "pid": proc.pid,
        "port": port,
        "model": spec["model"],
        "argv": argv,
        "env": masked(spec.get("env", {})),
    }


def check(paths: Paths) -> dict:
    """One look: is the server alive, is it ready (GET /v1/models), the log's last lines."""
    rec = procinfo.read_json(pidfile(paths))
    if not rec:
        return {
            "alive": False,
            "ready": False,
            "started": False,
            "log": procinfo.tail_lines(logfile(paths), 30),
        }
    alive = procinfo.is_same_process(rec)
    if rec.get(
        "headless"
    ):  # no HTTP to ask: alive is all there is (the caller waits a few seconds)
        return {
            "alive": alive,
            "ready": alive,
            "started": True,
            "pid": rec["pid"],
            "port": rec["port"],
            "models": [],
            "headless": True,
            "elapsed_s": time.time() - rec.get("started_at", time.time()),
            "log": procinfo.tail_lines(logfile(paths), 30 if not alive else 1),
        }
    code, body = _get(f"http://127.0.0.1:{rec['port']}/v1/models", timeout=3) if alive else (0, "")
    models = []
    if code == 200:
        try:
            models = [m.get("id") for m in json.loads(body).get("data", [])]
        except ValueError:
            pass
    return {
        "alive": alive,
        "ready": alive and code == 200,
        "started": True,
        "pid": rec["pid"],
        "port": rec["port"],
        "models": models,
        "elapsed_s": time.time() - rec.get("started_at", time.time()),
        "log": procinfo.tail_lines(logfile(paths), 30 if not alive else 1),
    }


def degenerate(text: str) -> str | None:
    """Why an answer looks broken (empty, one token over and over), or None."""
    if not text.strip():
        return "empty output"
    words = text.split()
    if len(words) >= 8 and len(set(words)) <= 2:
        return f"one token repeated: {' '.join(words[:6])!r}…"
    compact = re.sub(r"\s+", "", text)
    if len(compact) >= 20 and max(compact.count(c) for c in set(compact)) / len(compact) > 0.8:
        return f"one character repeated: {compact[:20]!r}…"
    return None


def smoke(paths: Paths, model: str) -> dict:
    import urllib.error
    import urllib.request

    rec = managed(paths)
    if not rec:
        raise ServerError("the server is not running")
    body = json.dumps(
        {
            "model": model,
            "max_tokens": 64,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
        }
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{rec['port']}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            data = json.loads(r.read())
        msg = data["choices"][0]["message"]
        text = msg.get("content") or ""
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as e:
        raise ServerError(f"smoke test request failed: {e}") from None
    why = degenerate(text)
    if why:
        raise ServerError(
            f"smoke test answer is degenerate ({why}): a known failure of some kernels on SM120 "
            "GPUs; check the vLLM version and attention backend",
            answer=text[:200],
        )
    return {"answer": text[:200]}


def stop(paths: Paths, grace: float, gpu_wait: float = 120.0) -> dict:
    rec = managed(paths)
    if not rec:
        return {"was_running": False, "killed": [], "gpu": None}
    token = rec.get("token")
    tree = (
        {p: procinfo.start_time(p) for p in kill.token_holders(TOKEN_ENV, token)} if token else {}
    )
    tree[rec["pid"]] = rec["start_time"]
    killed = kill.terminate({rec["pid"]: rec["start_time"]}, grace, TOKEN_ENV, token)
    left = kill.wait_gone(tree, 5)
    held = wait_gpu_free(set(tree), gpu_wait)
    return {"was_running": True, "pid": rec["pid"], "killed": killed, "alive": left, "gpu": held}


def wait_gpu_free(pids: set[int], timeout: float) -> dict | None:
    """Wait until none of `pids` holds GPU memory (vLLM workers free it slowly). None: no nvidia-smi."""
    deadline = time.monotonic() + timeout
    while True:
        apps = gpu.compute_apps()
        if apps is None:
            return None
        holding = [a for a in apps if a["pid"] in pids]
        if not holding or time.monotonic() >= deadline:
            return {"free": not holding, "still_held_by": holding}
        time.sleep(0.5)


def _metrics(port: int) -> dict:
    code, text = _get(f"http://127.0.0.1:{port}/metrics", timeout=3)
    return metrics.snapshot(text) if code == 200 else {}


def status(paths: Paths) -> dict:
    rec = managed(paths)
    if not rec:
        return {"up": False}
    c = check(paths)
    out = {
        "up": True,
        "ready": c["ready"],
        "pid": rec["pid"],
        "port": rec["port"],
        "model": rec["model"],
        "uptime_s": time.time() - rec["started_at"],
        "metrics": None,
        "headless": bool(rec.get("headless")),
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
        out["metrics"] = {
            "running": m2.get("running"),
            "waiting": m2.get("waiting"),
            "kv_cache_usage": m2.get("kv_cache"),
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
    p.add_argument("--root", type=Path)
    p.set_defaults(func=main)


def main(a: argparse.Namespace) -> int:
    paths = Paths((a.root or default_root()).expanduser().resolve())
    spec = json.loads(a.spec)
    try:
        if a.server_command == "start":
            out = start(paths, spec)
        elif a.server_command == "check":
            out = check(paths)
        elif a.server_command == "smoke":
            out = smoke(paths, spec.get("model", "default"))
        elif a.server_command == "stop":
            out = stop(paths, a.grace, a.gpu_wait)
        else:
            out = status(paths)
        print(json.dumps({"ok": True, **out}))
        return 0
    except ServerError as e:
        print(json.dumps({"ok": False, "error": str(e), **e.extra}))
        return 1
