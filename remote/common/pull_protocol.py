"""The pull protocol: the host lists its output files with a hash of the bytes just before what
the local copy already has; both sides hash with the one function, so an appended file is told from
a replaced one (standard library only)."""

from __future__ import annotations

from pathlib import Path

from .jobspec import Paths

PREFIX_BLOCK = 64 * 1024


def prefix_hash(path: Path, end: int) -> str | None:
    """sha256 of the last block before `end`: enough to tell an appended file from a replaced one.
    Both sides of pull call this one function, so they hash the same bytes."""
    import hashlib

    start = max(0, end - PREFIX_BLOCK)
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
    except FileNotFoundError:
        return None
    return hashlib.sha256(data).hexdigest() if len(data) == end - start else None


def output_files(paths: Paths, have: dict) -> dict:
    out = {}
    if not paths.outputs.is_dir():
        return out
    for p in sorted(paths.outputs.iterdir()):
        if not p.is_file() or p.name.startswith(".") or p.name.endswith((".idx", ".partial.jsonl")):
            # .idx: the runner's own index, rebuilt from the outputs wherever they are;
            # .partial.jsonl: turns of unfinished conversations, rewritten at every start
            continue
        size = p.stat().st_size
        local = have.get(p.name)
        entry = {"size": size}
        if isinstance(local, int) and 0 < local <= size:
            entry["prefix_sha256"] = prefix_hash(p, local)
        if not p.name.endswith(".jsonl") and not p.name.endswith(".torn"):
            entry["sha256"] = prefix_hash(p, size) if size <= PREFIX_BLOCK else None
        out[p.name] = entry
    return out
