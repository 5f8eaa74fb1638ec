"""hosts.yaml's settings for when nobody is watching (`job.notify`, `recover:`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from remote.common.jobspec import NOTIFY_EVENTS
from remote.common.keys import (
    check_keys,
    checks,
    choice,
    fields_of,
    mapping,
    number,
    string,
    string_list,
)
from remote.common.recover import RecoverSpec

from ..errors import ConfigError

RECOVER_FIELDS = checks(RecoverSpec)


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
