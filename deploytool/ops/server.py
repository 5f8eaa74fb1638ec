"""server.start / stop / status: the long-lived vLLM server, driven through `python -m remote server`."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlparse

from remote.common import procinfo
from remote.common.protocol import (
    GRACE_S,
    CtlStatus,
    ServerCheck,
    ServerSmoke,
    ServerStart,
    ServerStatus,
    ServerStop,
)
from remote.common.recover import RecoverSpec
from remote.common.status import SwitchStep
from remote.common.wire import from_wire

from ..config import Config, ServerSpec
from ..connectors import Connector
from ..errors import RemoteError
from .control import Asking, call

if TYPE_CHECKING:  # types only: answers load with the commands that build them
    from remote.common.answers import RestartAnswer, ServerStarted, ServerState, ServerStopped

LOAD_NOTE_S = 15.0  # a model's load said this often while a restart waits for it
HEADLESS_SETTLE_S = 5.0  # a headless worker alive this long got past its start-up checks
# a loading server is waited for on the host, in looks of up to this long: one SSH command for
# each, not one every poll, and its readiness seen within a quarter of a second
CHECK_WAIT_S = 15.0


def manages_engine(config: Config, host: str) -> bool:
    """The host's job talks to the server deploytool runs on that host (same host, same port)."""
    eng, server = config.job_for(host).engine, config.server_for(host)
    if eng.kind != "openai" or server.headless:
        return False
    urls = [urlparse(u) for u in eng.base_urls]
    return any(
        u.hostname in ("127.0.0.1", "localhost", "::1") and (u.port or 80) == server.port
        for u in urls
    )


def start(
    conn: Connector,
    spec: ServerSpec,
    *,
    poll: float = 2.0,
    progress: Callable[[str], None] = lambda s: None,
    clock=time.monotonic,
    sleep=time.sleep,
    recover: RecoverSpec | None = None,
    stage: str | None = None,
) -> ServerStarted:
    """Start it and wait until it answers; `stage`: the one it serves (None: the job's kept one)."""
    rec = recover.to_dict() if recover is not None else None
    started = call(conn, ServerStart(spec=spec, recover=rec, stage=stage))
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
    started.ready_after_s = clock() - t0
    started.smoke, started.served_model = smoke.answer, smoke.model
    return started


def _wait_ready(conn: Connector, spec: ServerSpec, t0, poll, progress, clock, sleep) -> bool:
    """Until the server answers (False) or, headless, has been alive a while (True)."""

    def note(elapsed: float, log: list[str]) -> float:
        said = log_gist((log or [""])[-1])
        progress(
            f"{conn.name}: loading {spec.model}: {elapsed:.0f}s of up to {spec.ready_timeout}s"
            + (f" · {said}" if said else "")
        )
        return clock()

    last_note = note(0.0, []) if not spec.headless else 0.0  # at once, not after the first look
    while True:
        left = spec.ready_timeout - (clock() - t0)
        # a headless worker has nothing to answer: it is looked at every poll until it settles
        wait = 0.0 if spec.headless else max(0.0, min(CHECK_WAIT_S, left))
        c = call(conn, ServerCheck(wait_s=wait))
        if c.ready and not spec.headless:
            return False
        if c.ready and c.elapsed_s >= HEADLESS_SETTLE_S:
            # a data-parallel worker serves no HTTP: alive for a while is ready; the head is what answers
            return True
        elapsed = clock() - t0
        if not c.alive:
            # this start's lines only: the log holds every start, each after its `==== ` line
            starts = [i for i, line in enumerate(c.log) if line.startswith("==== ")]
            this = c.log[starts[-1] + 1 :] if starts else c.log
            why = log_gist((procinfo.why_lines(this, 1) or [""])[-1])
            raise RemoteError(
                f"the server died during start-up after {elapsed:.0f}s"
                + (f": {why}" if why else "")
                + " (logs/server.log)",
                details=c.log,
            )
        if elapsed > spec.ready_timeout:
            raise RemoteError(
                f"the server is not ready after {spec.ready_timeout}s (server.ready_timeout); it is "
                "still running: `invoke server.status` to watch, `invoke server.stop` to give up",
                details=c.log,
            )
        if clock() - last_note >= 15 or not last_note:
            last_note = note(elapsed, c.log)
        if not wait:
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


def follow_switch(
    conn: Connector,
    begun: RestartAnswer,
    *,
    note,
    progress,
    told,
    stopped,
    started,
    every: float = 1.0,
    sleep=time.sleep,
    clock=time.monotonic,
) -> RestartAnswer:
    """Follow the server swap the host carries out for a restart (`begun`: its answer, mode
    `switching`) until its runner has started: what it does said as it goes (the runner stopped
    through `told`, the old server's stop, the model's load every 15 s, the new server), then the
    restart's own answer. One kept look (`ctl status --again`) whatever the load takes; a Ctrl-C or
    this process gone leaves the host going on alone."""
    from remote.common.answers import RestartAnswer, ServerStarted, ServerStopped

    sw = begun.switch
    why = (
        f"the server {sw.why}: restarting it (the model loads again)"
        if sw.why
        else ("the engine's server is down: starting it first")
    )
    note(f"{conn.name}: {why}")
    looks = Asking(conn, CtlStatus(again=True), asked=True)
    t0, loading_since, said_at, said_stop = clock(), None, None, False
    try:
        while True:
            view = looks.ask()
            now = view.switch and view.switch.find(sw.token)
            if now is None:
                raise RemoteError(
                    f"the server swap for the {sw.stage} stage was replaced by another command's: "
                    "`invoke status` shows where the job is"
                )
            if now.step == SwitchStep.STOPPING_RUNNER:
                told(view, clock() - t0)
            if now.server_stopped and not said_stop:
                said_stop = True
                stopped(_hosted(ServerStopped, now.server_stopped, conn.name))
            if now.step == SwitchStep.LOADING:
                loading_since = loading_since or clock()
                if said_at is None or clock() - said_at >= LOAD_NOTE_S:
                    said_at = clock()
                    progress(_loading(conn.name, now, clock() - loading_since))
            if now.step == SwitchStep.DONE:
                if now.server_started:
                    started(_hosted(ServerStarted, now.server_started, conn.name))
                return _hosted(RestartAnswer, now.answer, conn.name)
            _unless_ended_badly(now)
            sleep(every)
    finally:
        looks.close()


def _loading(host: str, now, waited: float) -> str:
    gist = log_gist(now.log_line or "")
    return f"{host}: loading {now.model}: {waited:.0f}s of up to {now.ready_timeout:g}s" + (
        f" · {gist}" if gist else ""
    )


def _unless_ended_badly(now) -> None:
    """A swap that failed, or whose process is gone (the watcher takes that up: not the laptop)."""
    if now.step == SwitchStep.FAILED:
        fix = f": {now.fix}" if now.fix else ""
        raise RemoteError(f"{now.error}{fix}", details=now.log)
    if not now.alive and now.step != SwitchStep.BEGUN:
        raise RemoteError(
            f"the host's process carrying out the server swap for the {now.stage} stage is gone "
            f"(at: {now.step}); the watcher takes it up again where it runs: `invoke status` shows "
            "where the job is"
        )


def _hosted(cls, data: dict, host: str):
    """An answer the host kept in its wire form (run/switch.json), typed, with its host."""
    answer = from_wire(cls, data)
    answer.host = host
    return answer


def stop(conn: Connector, grace: float = GRACE_S) -> ServerStopped:
    return call(conn, ServerStop(grace=grace))


def server_state(conn: Connector, quick: bool = False) -> ServerState:
    """`quick`: whether it is up and for which stage, without the second its rate takes."""
    return call(conn, ServerStatus(quick=quick))
