"""server.start / stop / status: the long-lived vLLM server, driven through `python -m remote server`."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlparse

from remote.common.protocol import (
    GRACE_S,
    ServerCheck,
    ServerSmoke,
    ServerStart,
    ServerStatus,
    ServerStop,
)
from remote.common.recover import RecoverSpec

from ..config import Config, ServerSpec
from ..connectors import Connector
from ..errors import RemoteError
from .control import call

if TYPE_CHECKING:  # types only: answers load with the commands that build them
    from remote.common.answers import ServerStarted, ServerState, ServerStopped

HEADLESS_SETTLE_S = 5.0  # a headless worker alive this long got past its start-up checks


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

    rec = recover.to_dict() if recover is not None else None
    started = call(conn, ServerStart(spec=spec, recover=rec))
    if started.already:
        if call(conn, ServerCheck()).ready:
            return started
        # a start in progress (the watcher's, after a death, or another terminal's): wait for it
        # as for our own, so that what follows finds a server that answers
        who = "the watcher" if started.by == "watcher" else "another server.start"
        progress(
            f"{conn.name}: the server is starting (pid {started.pid}, started by {who} "
            f"{started.up_s or 0:.0f}s ago): waiting for it"
        )
        started.waited = True
    t0 = clock()
    if _wait_ready(conn, spec, t0, poll, progress, clock, sleep):
        started.ready_after_s, started.headless = clock() - t0, True
        return started
    smoke = call(conn, ServerSmoke(spec=spec))
    started.ready_after_s, started.smoke, started.served_model = (
        clock() - t0,
        smoke.answer,
        smoke.model,
    )
    return started


def _wait_ready(conn: Connector, spec: ServerSpec, t0, poll, progress, clock, sleep) -> bool:
    """Until the server answers (False) or, headless, has been alive a while (True)."""
    last_note = 0.0
    while True:
        c = call(conn, ServerCheck())
        if c.ready and not spec.headless:
            return False
        if c.ready and c.elapsed_s >= HEADLESS_SETTLE_S:
            # a data-parallel worker serves no HTTP: alive for a while is ready; the head is what answers
            return True
        elapsed = clock() - t0
        if not c.alive:
            raise RemoteError(
                f"the server died during start-up after {elapsed:.0f}s (logs/server.log)",
                details=c.log,
            )
        if elapsed > spec.ready_timeout:
            raise RemoteError(
                f"the server is not ready after {spec.ready_timeout}s (server.ready_timeout); it is "
                "still running: `invoke server.status` to watch, `invoke server.stop` to give up",
                details=c.log,
            )
        if clock() - last_note >= 15 or not last_note:
            said = log_gist((c.log or [""])[-1])
            progress(
                f"{conn.name}: loading {spec.model}: {elapsed:.0f}s of up to {spec.ready_timeout}s"
                + (f" · {said}" if said else "")
            )
            last_note = clock()
        sleep(poll)


# vLLM's log prefix: `(APIServer pid=4242) INFO 12-02 00:45:21 [api_server.py:1234] `
_LOG_PREFIX = re.compile(
    r"^(\(\w+ pid=\d+\)\s*)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[\d-]+\s+[\d:.]+\s+(\[[^\]]*\]\s*)?"
)
GIST_CHARS = 90


def log_gist(line: str) -> str:
    """What a server log line says, without vLLM's prefix, cut whole at a word with an ellipsis."""
    text = _LOG_PREFIX.sub("", line.strip()).strip()
    if len(text) <= GIST_CHARS:
        return text
    return text[:GIST_CHARS].rsplit(" ", 1)[0] + " …"


def stop(conn: Connector, grace: float = GRACE_S) -> ServerStopped:
    return call(conn, ServerStop(grace=grace))


def server_state(conn: Connector) -> ServerState:
    return call(conn, ServerStatus())
