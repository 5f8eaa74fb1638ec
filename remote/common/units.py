"""Small parsers shared by both sides (the local side imports them to validate flags early)."""

from __future__ import annotations

import re

DATASET_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_TOKENS_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGbB]?)\s*$")
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000, "b": 1_000_000_000}


def parse_tokens(text: str | int) -> int:
    """'10M' -> 10_000_000, '500k' -> 500_000, '2500000' -> 2_500_000."""
    if isinstance(text, bool):
        raise ValueError(f"expected a token count like 10M, 500k or 2500000, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"expected a non-negative token count, got {text}")
        return text
    m = _TOKENS_RE.match(str(text))
    if not m:
        raise ValueError(f"expected a token count like 10M, 500k or 2500000, got {text!r}")
    value = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if value != int(value):
        raise ValueError(f"token count {text!r} is not a whole number")
    return int(value)


def check_dataset_name(name: str) -> str:
    if not isinstance(name, str) or not DATASET_NAME_RE.match(name):
        raise ValueError(f"dataset name {name!r} must match {DATASET_NAME_RE.pattern}")
    return name


def parse_cap(text: str) -> tuple[str, int]:
    """'B2=2636' -> ('B2', 2636)."""
    name, sep, value = str(text).partition("=")
    if not sep:
        raise ValueError(f"--cap expects DS=N, got {text!r}")
    check_dataset_name(name.strip())
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError(f"--cap {text!r}: N must be a whole number") from None
    if n < 0:
        raise ValueError(f"--cap {text!r}: N must be >= 0")
    return name.strip(), n


def parse_dataset_list(text: str | None) -> list[str] | None:
    if text is None or text == "":
        return None
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    for n in names:
        check_dataset_name(n)
    return names
