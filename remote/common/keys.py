"""hosts.yaml's keys, each declared once on the dataclass it fills, with its default and its check
(`setting(default, check)`): the validator and docs/configuration.md are held to it. Each check
raises BadValue naming the key (`where`). Standard library only: the host reads these dataclasses.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .caps import parse_tokens
from .words import suggest


class BadValue(ValueError):
    """A value hosts.yaml gives a key that the key does not take (the message names the key)."""


def setting(
    default: Any = None,
    check: Callable[[str, Any], Any] | None = None,
    *,
    factory=None,
    required: bool = False,
):
    """A hosts.yaml key's dataclass field: its default (none where `required`) and its check."""
    kw = {"default_factory": factory} if factory is not None else {"default": default}
    return dataclasses.field(metadata={"check": check}, **({} if required else kw))


def checks(cls) -> dict[str, Callable[[str, Any], Any]]:
    """key -> check of every hosts.yaml key `cls` declares, in declaration order."""
    return {f.name: f.metadata["check"] for f in dataclasses.fields(cls) if f.metadata.get("check")}


def show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


# what a user looking for the caps writes into the job: they are the restart's, kept on the host
_CAP_WORDS = {"cap", "caps", "max_samples", "max-samples", "max_tokens", "max-tokens"}
_CAPS_HINT = (
    " (caps are not set in hosts.yaml: `invoke restart --max-samples N`, `--cap DS=N` or "
    "`--max-tokens T` set them, kept on the host)"
)


def check_keys(where: str, data: dict, allowed) -> None:
    for name in data:
        if name not in allowed:
            hint = suggest(name, allowed) or (_CAPS_HINT if name in _CAP_WORDS else "")
            raise BadValue(f"{where}.{name}: unknown key{hint}".lstrip("."))


def mapping(where: str, value: Any, *, optional=True) -> dict:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise BadValue(f"{where}: expected a mapping, got {show(value)}")
    return value


def int_in(lo: int | None = None, hi: int | None = None) -> Callable[[str, Any], int]:
    def check(where: str, v: Any) -> int:
        ok = isinstance(v, int) and not isinstance(v, bool)
        if ok and (lo is None or v >= lo) and (hi is None or v <= hi):
            return v
        rng = f" {lo}-{hi}" if hi is not None else (f" >= {lo}" if lo is not None else "")
        raise BadValue(f"{where}: expected an integer{rng}, got {show(v)}")

    return check


def number(lo: float = 0.0) -> Callable[[str, Any], float]:
    def check(where: str, v: Any) -> float:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= lo:
            return float(v)
        raise BadValue(f"{where}: expected a number >= {lo:g}, got {show(v)}")

    return check


def string(where: str, v: Any) -> str:
    if isinstance(v, str) and v.strip():
        return v
    raise BadValue(f"{where}: expected a non-empty string, got {show(v)}")


def boolean(where: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise BadValue(f"{where}: expected true or false, got {show(v)}")


def choice(choices) -> Callable[[str, Any], str]:
    def check(where: str, v: Any) -> str:
        if v in choices:
            return v
        raise BadValue(
            f"{where}: expected one of {', '.join(choices)}, got {show(v)}{suggest(v, choices)}"
        )

    return check


def string_list(where: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise BadValue(f"{where}: expected a list of strings, got {show(v)}")
    out = []
    for i, item in enumerate(v):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise BadValue(f"{where}[{i}]: expected a string, got {show(item)}")
        out.append(str(item))  # YAML turns "8" into 8 when unquoted; argv wants strings
    return tuple(out)


def string_map(where: str, v: Any) -> dict:
    v = mapping(where, v)
    for k, val in v.items():
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            raise BadValue(f"{where}.{k}: expected a string, got {show(val)}")
    return {str(k): str(val) for k, val in v.items()}


def free_map(where: str, v: Any) -> dict:
    return dict(mapping(where, v))


def relative_path(where: str, v: Any) -> str:
    """A file's path on the host, inside remote_dir."""
    v = string(where, v)
    if v.startswith("/") or ".." in v.split("/"):
        raise BadValue(f"{where}: must be a relative path inside remote_dir, got {show(v)}")
    return v


def url(where: str, v: Any) -> str:
    v = string(where, v)
    if not v.startswith(("http://", "https://")):
        raise BadValue(f"{where}: expected an http:// or https:// URL, got {show(v)}")
    return v


def url_list(where: str, v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not v:
        raise BadValue(f"{where}: expected a list of one or more URLs, got {show(v)}")
    urls = tuple(url(f"{where}[{i}]", u) for i, u in enumerate(v))
    if dup := next((u for u in urls if urls.count(u) > 1), None):
        raise BadValue(f"{where}: {dup} is listed twice")
    return urls


def tokens(where: str, v: Any) -> int:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
        raise BadValue(f"{where}: expected a positive token count, got {show(v)}")
    try:
        n = parse_tokens(v)
    except ValueError as e:
        raise BadValue(f"{where}: {e}") from None
    if n <= 0:
        raise BadValue(f"{where}: expected a positive token count, got {show(v)}")
    return n


def fields_of(where: str, data: dict, spec: dict) -> dict:
    """Check every key of `data` against `spec` (key -> check) and return the checked values."""
    check_keys(where, data, spec)
    return {k: spec[k](f"{where}.{k}", v) for k, v in data.items()}
