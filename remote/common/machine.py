"""What the host machine holds: nvidia-smi, read (None wherever the host has none), and the served
model's config.json as it lies on disk (its layers and hidden size)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from .wire import HostFault


def query(query: str, timeout: float) -> list[list[str]] | None:
    """nvidia-smi's CSV rows for one --query-*, split and stripped; None where there is no nvidia-smi."""
    exe = os.environ.get("DEPLOYTOOL_NVIDIA_SMI") or shutil.which("nvidia-smi")
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


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


def model_config(model: str) -> dict:
    """The shape of a model's config.json (a multimodal model's is its text model's): layers,
    hidden size, dtype, each None where not found in the model's folder or the Hugging Face cache."""
    for path in _config_files(model):
        try:
            cfg = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(cfg, dict):
            continue
        for part in (cfg.get("text_config"), cfg.get("language_config"), cfg):
            if isinstance(part, dict) and _count(part.get("num_hidden_layers")):
                dtype = part.get("torch_dtype") or part.get("dtype") or cfg.get("torch_dtype")
                return {
                    "layers": part["num_hidden_layers"],
                    "hidden": _count(part.get("hidden_size")),
                    "dtype_bytes": DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None,
                }
    return {"layers": None, "hidden": None, "dtype_bytes": None}


def _count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _config_files(model: str):
    local = Path(os.path.expanduser(model))
    if local.is_dir():
        yield local / "config.json"
        return
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if not hub:
        hub = os.path.join(
            os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub"
        )
    repo = Path(hub) / ("models--" + model.replace("/", "--"))
    try:
        ref = (repo / "refs" / "main").read_text().strip()
    except OSError:
        ref = ""
    if ref:
        yield repo / "snapshots" / ref / "config.json"
    yield from sorted((repo / "snapshots").glob("*/config.json"))


def default_layers(model: str) -> list[int]:
    """speculators' default for a model of L layers: [2, L/2, L-3] and the last hidden state, L."""
    n = model_config(model)["layers"]
    if n is None:
        raise HostFault(
            "server",
            f"the hidden-states stage needs the layers to keep, and {model}'s config.json (with "
            "num_hidden_layers) is not on the host",
            fix="set server.hidden_states.layers in hosts.yaml (e.g. [2, 30, 58, 61] for 61 layers)",
        )
    if n < 4:
        raise HostFault(
            "server",
            f"{model} has {n} layers: too few for the default layers [2, L/2, L-3, L]",
            fix="set server.hidden_states.layers in hosts.yaml",
        )
    return [2, n // 2, n - 3, n]
