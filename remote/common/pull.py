"""The pull protocol's one shared piece: both sides hash the same bytes to tell an appended file
from a replaced one (standard library only)."""

from __future__ import annotations

from pathlib import Path

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
