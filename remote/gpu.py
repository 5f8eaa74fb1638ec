"""Who holds GPU memory (nvidia-smi), and which of them are allowed to (the inference server)."""

from __future__ import annotations

import os
import shutil
import subprocess

from . import procinfo


class GPUBusy(Exception):
    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


def _nvidia_smi() -> str | None:
    return os.environ.get("DEPLOYTOOL_NVIDIA_SMI") or shutil.which("nvidia-smi")


def _query(query: str, timeout: float) -> list[list[str]] | None:
    """nvidia-smi's CSV rows for one --query-*, split and stripped; None where there is no nvidia-smi."""
    exe = _nvidia_smi()
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [[p.strip() for p in line.split(",")] for line in out.stdout.splitlines()]


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None  # "[N/A]" on some boards


def gpus() -> list[dict] | None:
    """[{index, util, memory_used, memory_total}] (%, MiB) per GPU, or None where there is no nvidia-smi."""
    rows = _query("--query-gpu=index,utilization.gpu,memory.used,memory.total", timeout=15)
    if rows is None:
        return None
    return [
        {
            "index": int(r[0]),
            "util": _int(r[1]),
            "memory_used": _int(r[2]),
            "memory_total": _int(r[3]),
        }
        for r in rows
        if len(r) >= 4 and r[0].isdigit()
    ]


def compute_apps() -> list[dict] | None:
    """[{pid, used_mib}] from nvidia-smi, or None where there is no nvidia-smi."""
    rows = _query("--query-compute-apps=pid,used_memory", timeout=30)
    if rows is None:
        return None
    return [
        {"pid": int(r[0]), "used_mib": _int(r[1]) or 0}
        for r in rows
        if len(r) >= 2 and r[0].isdigit()
    ]


def _listener_pids(port: int) -> set[int]:
    """pids with a listening TCP socket on `port` (the OpenAI-compatible server)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    if not inodes:
        return set()
    pids = set()
    for pid in procinfo.all_pids():
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    pids.add(pid)
                    break
        except OSError:
            continue
    return pids


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid in procinfo.all_pids():
        parent = procinfo.ppid(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out


def allowed_pids(paths, engine_port: int | None) -> set[int]:
    """The inference server may hold GPU memory: the managed server's processes (its token), and the
    process serving the engine's port with all its descendants (vLLM's engine core and TP workers)."""
    from .kill import token_holders
    from .server import TOKEN_ENV, pidfile  # imported here: server imports this module

    allowed: set[int] = set()
    rec = procinfo.live_record(pidfile(paths))
    if rec:
        allowed |= set(token_holders(TOKEN_ENV, rec["token"])) if rec.get("token") else set()
        allowed.add(rec["pid"])
    servers = _listener_pids(engine_port) if engine_port else set()
    return _descendants(servers | allowed)


def check(paths, engine_port: int | None, force: bool = False) -> dict:
    apps = compute_apps()
    if apps is None:
        return {"checked": False, "note": "no nvidia-smi on this host: GPU check skipped"}
    allowed = allowed_pids(paths, engine_port)
    others = [
        dict(a, cmd=" ".join(procinfo.cmdline(a["pid"]))[:120])
        for a in apps
        if a["pid"] not in allowed
    ]
    report = {"checked": True, "apps": apps, "blocking": others}
    if others and not force:
        names = ", ".join(
            f"pid {o['pid']} ({o['used_mib']} MiB: {o['cmd'] or '?'})" for o in others
        )
        raise GPUBusy(
            f"GPU memory is held by processes that are not the inference server: {names}; "
            "stop them (or pass --force-gpu to start anyway)",
            report,
        )
    return report
