"""server.start / stop / status: the long-lived vLLM server, driven through `python -m remote server`."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlparse

from remote.common.protocol import GRACE_S, CtlStatus, ServerStart, ServerStatus, ServerStop
from remote.common.recover import RecoverSpec
from remote.common.stages import stage_of
from remote.common.status import SwitchStep, SwitchView
from remote.common.wire import FAULTS, from_wire

from ..config import Config, ServerSpec
from ..connectors import Connector
from ..errors import DeployToolError, RemoteError
from .control import Asking, call

if TYPE_CHECKING:  # types only: answers load with the commands that build them
    from remote.common.answers import RestartAnswer, ServerStarted, ServerState, ServerStopped

LOAD_NOTE_S = 15.0  # a model's load said this often while the host waits for it
LOST_LOOKS = 5  # looks in a row that found no host before following a swap gives up (it goes on)


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
    poll: float = 1.0,
    progress: Callable[[str], None] = lambda s: None,
    clock=time.monotonic,
    sleep=time.sleep,
    recover: RecoverSpec | None = None,
    stage: str | None = None,
) -> ServerStarted:
    """Start it; `stage`: the one it serves (None: the job's kept one). The host waits for its load
    and smoke test (a start already under way, the watcher's, too) and this follows that wait, so
    that what follows finds a server that answers."""
    from remote.common.answers import ServerStarted

    rec = recover.to_dict() if recover is not None else None
    started = call(conn, ServerStart(spec=spec, recover=rec, stage=stage))
    if started.switch is None:  # up and answering already
        return started
    if started.already:
        who = "the watcher" if started.by == "watcher" else "another server.start"
        progress(
            f"{conn.name}: the server is starting (pid {started.pid}, started by {who} "
            f"{started.up_s or 0:.0f}s ago): waiting for it"
        )
        started.waited = True
    done = follow_switch(
        conn, started.switch, progress=progress, every=poll, sleep=sleep, clock=clock
    )
    ready = _hosted(ServerStarted, done.server_started, conn.name)
    started.ready_after_s, started.headless = ready.ready_after_s, ready.headless
    started.smoke, started.served_model, started.switch = ready.smoke, ready.served_model, None
    return started


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
    sw: SwitchView,
    *,
    progress,
    on_status=lambda view, waited: None,
    stopped=lambda answer: None,
    every: float = 1.0,
    sleep=time.sleep,
    clock=time.monotonic,
) -> SwitchView:
    """Follow a server swap the host carries out (`sw`: as begun) until it is done, saying what it
    does as it goes (a runner it stops through `on_status`, the old server's stop through `stopped`, the
    model's load every 15 s); its view as it ended. One kept look (`ctl status --again`) whatever
    the load takes; a Ctrl-C or this process gone leaves the host going on alone."""
    from remote.common.answers import ServerStopped

    looks = Asking(conn, CtlStatus(again=True), asked=True)
    t0, loading_since, shown_at, stop_shown, lost = clock(), None, None, False, 0
    try:
        while True:
            try:
                view = looks.ask()
            except DeployToolError as e:  # a link lost a moment: the host goes on, looked at anew
                lost += 1
                if lost >= LOST_LOOKS:
                    raise RemoteError(
                        f"{e}; the host goes on with the swap alone: `invoke status` shows where "
                        "it is"
                    ) from None
                sleep(every)
                continue
            lost = 0
            now = view.switch and view.switch.find(sw.token)
            if now is None:
                raise RemoteError(
                    f"the server swap for the {sw.stage} stage was replaced by another command's: "
                    "`invoke status` shows where the job is"
                )
            if now.step == SwitchStep.STOPPING_RUNNER:
                on_status(view, clock() - t0)
            if now.server_stopped and not stop_shown:
                stop_shown = True
                stopped(_hosted(ServerStopped, now.server_stopped, conn.name))
            if now.step == SwitchStep.LOADING:
                loading_since = loading_since or clock()
                if shown_at is None or clock() - shown_at >= LOAD_NOTE_S:
                    shown_at = clock()
                    progress(_loading(conn.name, now, clock() - loading_since))
            if now.step == SwitchStep.DONE:
                return now
            _unless_ended_badly(now)
            sleep(every)
    finally:
        looks.close()


def follow_restart(
    conn: Connector, begun: RestartAnswer, *, note, started, **callbacks
) -> RestartAnswer:
    """A restart the host goes on with alone (`begun`: its answer, `switching`): followed until its
    runner has started; the restart's own answer."""
    from remote.common.answers import RestartAnswer, ServerStarted

    sw = begun.switch
    if not stage_of(sw.stage).asks_server:  # its own process holds the GPUs
        held = f"the server {sw.why}: stopping it" if sw.why else "the server is kept down"
        why = f"{held} (the next stage that asks it starts it again)"
    elif sw.why:
        why = f"the server {sw.why}: restarting it (the model loads again)"
    else:
        why = "the engine's server is down: starting it first"
    note(f"{conn.name}: {why}")
    done = follow_switch(conn, sw, **callbacks)
    if done.server_started:
        started(_hosted(ServerStarted, done.server_started, conn.name))
    return _hosted(RestartAnswer, done.answer, conn.name)


def _loading(host: str, now, waited: float) -> str:
    gist = log_gist(now.log_line or "")
    return f"{host}: loading {now.model}: {waited:.0f}s of up to {now.ready_timeout:g}s" + (
        f" · {gist}" if gist else ""
    )


def _unless_ended_badly(now) -> None:
    """A swap that failed, or whose process is gone (the watcher takes that up: not the laptop)."""
    if now.step == SwitchStep.FAILED:
        fix = f": {now.fix}" if now.fix else ""
        raise RemoteError(f"{now.error}{fix}", FAULTS.get(now.code), details=now.log)
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
