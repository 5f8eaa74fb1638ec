"""hosts.yaml's settings for when nobody is watching (`job.notify`, `recover:`) and the
hidden-states stage's server (`server.hidden_states`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from remote.common.jobspec import NOTIFY_EVENTS
from remote.common.recover import RecoverSpec

from ..errors import ConfigError
from .validate import (
    boolean,
    check_keys,
    choice,
    fields_of,
    int_in,
    mapping,
    number,
    show,
    string,
    string_list,
)

RECOVER_FIELDS = {
    "server": boolean,
    "runner": boolean,
    "max_restarts": int_in(0, 1000),
    "window": number(1.0),
    "backoff": number(0.0),
    "wedged_after": number(1.0),
    "on_boot": boolean,
}


def parse_recover(where: str, raw: Any, base: RecoverSpec) -> RecoverSpec:
    """`recover:` — false turns the watcher off; a mapping overrides the defaults key by key."""
    if raw is None:
        return base
    if raw is False:
        return RecoverSpec(enabled=False)
    values = {} if raw is True else fields_of(where, mapping(where, raw), RECOVER_FIELDS)
    return replace(base, enabled=True, **values)


def parse_notify(where: str, raw: Any) -> dict:
    """job.notify: {command, on: [events] (default: all but engine_up), timeout: seconds}."""
    if raw is None:
        return {}
    raw = mapping(where, raw)
    check_keys(where, raw, ("command", "on", "timeout"))
    if "command" not in raw:
        raise ConfigError(f"{where}.command: required (a shell command run on the host with sh -c)")
    out = {"command": string(f"{where}.command", raw["command"])}
    if "on" in raw:
        events = string_list(f"{where}.on", raw["on"])
        for i, e in enumerate(events):
            choice(NOTIFY_EVENTS)(f"{where}.on[{i}]", e)
        out["on"] = list(events)
    if "timeout" in raw:
        out["timeout"] = number(1.0)(f"{where}.timeout", raw["timeout"])
    return out


def _layers(where: str, v: Any) -> list[int]:
    ints = (
        isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    )
    if not ints or min(v) < 0 or len(set(v)) != len(v):
        raise ConfigError(
            f"{where}: expected distinct layer numbers from 0, like [2, 30, 58, 61], got {show(v)}"
        )
    return list(v)


HIDDEN_SERVER_FIELDS = {"layers": _layers, "connector": string, "connector_module": string}


def parse_hidden_server(where: str, raw: Any) -> dict:
    """`server.hidden_states`: the layers to keep and vLLM's connector for the hidden-states stage."""
    return fields_of(where, mapping(where, raw), HIDDEN_SERVER_FIELDS)
