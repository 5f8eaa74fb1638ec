"""Run one operation on several hosts in parallel; keep every host's result (fabric's Group idea)."""

from __future__ import annotations

import json
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypeVar

from ..config import Config, HostConfig
from ..connectors import Connector, connect
from ..errors import DeployToolError, MultiHostError
from .control import in_thread, preflight_message

if TYPE_CHECKING:
    from remote.common.jobspec import EngineSpec

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
    futures = {h.name: in_thread(f"host {h.name}", one, h) for h in hosts}
    wait_all(list(futures.values()))
    for name, fut in futures.items():
        try:
            results[name] = fut.result()
        except DeployToolError as e:
            failures[name] = e
    if failures:
        raise MultiHostError(results, failures)
    return results


def wait_all(futures: list[Future], tick: float = 0.2) -> None:
    """Until every one is done, in short waits: a Ctrl-C the kernel hands to a host's thread only
    sets a flag, which a main thread blocked on a lock without a timeout never looks at."""
    while not all(f.done() for f in futures):
        wait(futures, timeout=tick)


@dataclass
class Probe:
    """`invoke hosts`' look at one host: usable or not, and the one line that says why."""

    ok: bool
    detail: str


def probe(conn: Connector, engine: EngineSpec) -> Probe:
    """Reachable, what Python the host has, whether it imports what the job's engine needs, and
    whether the job's servers (those that answer) serve the job's model. One round trip: the host
    runs remote/host/preflight.py's source, so nothing needs to be deployed yet."""
    from pathlib import Path

    from remote.common.answers import HostProbe, PreflightProblem
    from remote.common.wire import from_wire

    # sent as source, never imported here (deploytool imports only remote.common)
    source = (Path(__file__).resolve().parents[2] / "remote" / "host" / "preflight.py").read_text()
    urls = list(engine.base_urls)
    res = conn.run(conn.python("-c", source, json.dumps(engine.to_dict()), json.dumps(urls)))
    try:
        found = from_wire(HostProbe, res.answer())
    except ValueError:  # no JSON line, or one of another release's shape
        return Probe(False, res.why("python failed"))
    if found.missing:
        problem = PreflightProblem(found.executable or conn.host.python, engine.kind, found.missing)
        return Probe(False, preflight_message(conn.name, problem))
    if found.model:
        return Probe(False, found.model)
    return Probe(True, f"{found.node}, Python {found.version}")
