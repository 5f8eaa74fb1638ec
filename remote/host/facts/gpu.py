"""Who holds GPU memory (nvidia-smi), and whether any of them is not allowed to (the caller says who
is: the inference server's processes). Also: who listens on a port."""

from __future__ import annotations

import os

from ...common import procinfo
from ...common.answers import GpuApp, GpuCheck
from ...common.machine import compute_apps
from ...common.wire import HostFault


class GPUBusy(HostFault):
    def __init__(self, message: str, report: dict):
        fix = "stop them (or pass --force-gpu to start anyway)"
        super().__init__("gpu_busy", message, fix=fix, gpu=report)


def listener_pids(port: int) -> set[int]:
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


def check(allowed: set[int], force: bool = False) -> GpuCheck:
    """Refuse (GPUBusy) when a process outside `allowed` holds GPU memory, unless forced."""
    apps = compute_apps()
    if apps is None:
        return GpuCheck(checked=False, note="no nvidia-smi on this host: GPU check skipped")
    held = [GpuApp(a["pid"], a["used_mib"]) for a in apps]
    others = [
        GpuApp(a.pid, a.used_mib, " ".join(procinfo.cmdline(a.pid))[:120])
        for a in held
        if a.pid not in allowed
    ]
    report = GpuCheck(checked=True, apps=held, blocking=others)
    if others and not force:
        names = ", ".join(f"pid {o.pid} ({o.used_mib} MiB: {o.cmd or '?'})" for o in others)
        raise GPUBusy(
            f"GPU memory is held by processes that are not the inference server: {names}", report
        )
    return report
