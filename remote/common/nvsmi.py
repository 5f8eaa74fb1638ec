"""nvidia-smi, read: every GPU's use (the runner samples it) and who holds GPU memory (the host side
checks it before a start). None wherever the host has no nvidia-smi."""

from __future__ import annotations

import os
import shutil
import subprocess


def _nvidia_smi() -> str | None:
    return os.environ.get("DEPLOYTOOL_NVIDIA_SMI") or shutil.which("nvidia-smi")


def query(query: str, timeout: float) -> list[list[str]] | None:
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
    rows = query("--query-gpu=index,utilization.gpu,memory.used,memory.total", timeout=15)
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
    rows = query("--query-compute-apps=pid,used_memory", timeout=30)
    if rows is None:
        return None
    return [
        {"pid": int(r[0]), "used_mib": _int(r[1]) or 0}
        for r in rows
        if len(r) >= 2 and r[0].isdigit()
    ]
