"""server.start / stop / status: the long-lived vLLM server, driven through `python -m remote server`."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Callable
from urllib.parse import urlparse

from remote.common.answers import ServerStarted, ServerState, ServerStopped
from remote.common.recover import RecoverSpec

from .config import Config, ServerSpec
from .connectors import Connector
from .control import call
from .errors import RemoteError

HEADLESS_SETTLE_S = 5.0  # a headless worker alive this long got past its start-up checks


def spec_json(spec: ServerSpec) -> str:
    d = asdict(spec)
    d["args"] = list(spec.args)
    return json.dumps(d)


def manages_engine(config: Config, host: str) -> bool:
    """The host's job talks to the server deploytool runs on that host (same host, same port)."""
    eng, server = config.job_for(host).engine, config.server_for(host)
    if eng.kind != "openai" or server.headless:
        return False
    for u in eng.base_urls:
        url = urlparse(u)
        if url.hostname in ("127.0.0.1", "localhost", "::1") and (url.port or 80) == server.port:
            return True
    return False


def start(
    conn: Connector,
    spec: ServerSpec,
    *,
    poll: float = 2.0,
    progress: Callable[[str], None] = lambda s: None,
    clock=time.monotonic,
    sleep=time.sleep,
    recover: RecoverSpec | None = None,
) -> ServerStarted:
    extra = ["--recover", json.dumps(recover.to_dict())] if recover is not None else []
    started = call(conn, "server", "start", "--spec", spec_json(spec), *extra)
    if started.get("already"):
        return ServerStarted.from_dict(dict(started, host=conn.name))
    t0 = clock()
    last_note = 0.0
    while True:
        c = call(conn, "server", "check")
        if c["ready"] and not spec.headless:
            break
        if c["ready"] and c.get("elapsed_s", 0) >= HEADLESS_SETTLE_S:
            # a data-parallel worker serves no HTTP: alive for a while is ready; the head is what answers
            return ServerStarted.from_dict(
                dict(started, host=conn.name, ready_after_s=clock() - t0, headless=True)
            )
        elapsed = clock() - t0
        if not c["alive"]:
            raise RemoteError(
                f"the server died during start-up after {elapsed:.0f}s (logs/server.log)",
                details=c.get("log") or (),
            )
        if elapsed > spec.ready_timeout:
            raise RemoteError(
                f"the server is not ready after {spec.ready_timeout}s (server.ready_timeout); it is "
                "still running: `invoke server.status` to watch, `invoke server.stop` to give up",
                details=c.get("log") or (),
            )
        if clock() - last_note >= 15 or not last_note:
            last_line = (c.get("log") or [""])[-1][:100]
            progress(
                f"{conn.name}: loading {spec.model}: {elapsed:.0f}s of up to {spec.ready_timeout}s; {last_line}"
            )
            last_note = clock()
        sleep(poll)
    smoke = call(conn, "server", "smoke", "--spec", spec_json(spec))
    return ServerStarted.from_dict(
        dict(
            started,
            host=conn.name,
            ready_after_s=clock() - t0,
            smoke=smoke["answer"],
            served_model=smoke.get("model"),
        )
    )


def stop(conn: Connector, grace: float = 30.0) -> ServerStopped:
    answer = call(conn, "server", "stop", "--grace", f"{grace:g}")
    return ServerStopped.from_dict(dict(answer, host=conn.name))


def status(conn: Connector) -> ServerState:
    return ServerState.from_dict(dict(call(conn, "server", "status"), host=conn.name))
