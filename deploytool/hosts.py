"""Run one operation on several hosts in parallel; keep every host's result (fabric's Group idea)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from .config import Config, HostConfig
from .connectors import Connector, connect
from .errors import DeployToolError, MultiHostError

T = TypeVar("T")


def on_hosts(
    config: Config,
    hosts: list[HostConfig],
    fn: Callable[[Connector], T],
    trusted: Callable[[str, str], None],
) -> dict[str, T]:
    """fn(conn) on every host at once. One failing loses nobody else's result: all are raised together.
    `trusted(host, key)` hears of every host key accepted on first use, to say it out loud."""

    def one(h: HostConfig):
        with connect(h, config) as conn:
            try:
                return fn(conn)
            finally:
                for key in conn.accepted:
                    trusted(h.name, key)

    results: dict[str, T] = {}
    failures: dict[str, DeployToolError] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        futures = {h.name: pool.submit(one, h) for h in hosts}
        for name, fut in futures.items():
            try:
                results[name] = fut.result()
            except DeployToolError as e:
                failures[name] = e
    if failures:
        raise MultiHostError(results, failures)
    return results


def probe(conn: Connector, engine_kind: str = "simulate") -> dict:
    """Reachable, what Python the host has, and whether it imports what the job's engine needs."""
    from remote.preflight import ENGINE_MODULES, PROBE

    from .control import preflight_message

    script = (
        "import sys,platform;print(platform.node(), sys.version.split()[0], sys.executable)\n"
        + PROBE
    )
    res = conn.run(conn.python("-c", script, *ENGINE_MODULES.get(engine_kind, ())))
    lines = res.out.strip().splitlines()
    if not res.ok or len(lines) < 2:
        return {"ok": False, "detail": res.why("python failed")}
    node, version, executable = (lines[0].split(" ", 2) + ["", ""])[:3]
    missing = json.loads(lines[-1])
    if missing:
        return {
            "ok": False,
            "detail": preflight_message(
                conn.name,
                {
                    "python": executable or conn.host.python,
                    "engine": engine_kind,
                    "missing": missing,
                },
            ),
        }
    return {"ok": True, "detail": f"{node}, Python {version}"}
