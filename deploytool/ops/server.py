"""server.start / stop / status: the long-lived vLLM server, driven through `python -m remote server`."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlparse

from remote.common import procinfo
from remote.common.caps import DRAFT, HIDDEN_STATES
from remote.common.jobspec import extracts, flag_value
from remote.common.protocol import (
    GRACE_S,
    RunArgs,
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
from .control import stop as stop_runner

if TYPE_CHECKING:  # types only: answers load with the commands that build them
    from remote.common.answers import ServerStarted, ServerState, ServerStopped

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


def up_for_restart(
    conn: Connector,
    config: Config,
    flags: RunArgs,
    *,
    with_server,
    drain=False,
    ahead=lambda: None,
    note,
    progress,
    stopped,
    started,
) -> None:
    """Before a restart: the job's own server up, and started for the stage the restart runs (a
    server started for the other stage is restarted); `--no-server` leaves it as it is. `ahead()`
    is called before any server is stopped or started: the host's word on the restart itself."""
    if not manages_engine(config, conn.name):
        return
    spec, state = config.server_for(conn.name), server_state(conn, quick=True)
    wrong = with_server and wrong_for_stage(spec, flags.stage, state)
    planned = None  # the server the stage would get: every check that can refuse it has run
    if with_server and not wrong and flags.stage == DRAFT and state.drafts:
        # the draft measured is hosts.yaml's: a server running another one is started again
        planned = call(conn, ServerStart(spec=spec, stage=DRAFT, dry_run=True))
        if flag_value(planned.argv, "--speculative-config") != state.speculative:
            wrong = "runs another draft than hosts.yaml's server.draft"
    if not wrong and state.up:
        return
    if not with_server:  # and it is down (`wrong` is only looked for where it may start one)
        if flags.force:
            return
        raise RemoteError(
            "the job's vLLM server is down and --no-server keeps it down: the runner would "
            "wait at 0 tokens; nothing was started. `invoke server.start` first (or "
            "`invoke restart` without --no-server), or add --force to start the runner anyway"
        )
    if wrong and planned is None:  # what can refuse the new server, before the old one stops
        call(conn, ServerStart(spec=spec, stage=flags.stage, dry_run=True))
    ahead()
    if wrong:
        note(f"{conn.name}: the server {wrong}: restarting it (the model loads again)")
        # the runner first: none of its requests goes to (or is counted by) a server made for
        # another stage, and it never ends failed for a server taken from under it
        stop_runner(conn, grace=flags.grace, drain=drain)  # --drain: its requests finish first
        stopped(stop(conn))
    else:
        note(f"{conn.name}: the engine's server is down: starting it first")
    recover = config.recover_for(conn.name)
    try:
        started(start(conn, spec, progress=progress, recover=recover, stage=flags.stage))
    except RemoteError as e:
        if not wrong:
            raise
        # the server that ran is stopped by now: say so, and the way back to it
        raise RemoteError(
            f"{e}; the server that ran before is stopped: `invoke restart --stage "
            f"{state.serves}` starts it again",
            e.code,
            e.details,
        ) from None


def wrong_for_stage(spec: ServerSpec, stage: str | None, state: ServerState) -> str | None:
    """Why the running server cannot serve `stage` as it was started (None: it can, or no stage
    was asked): the hidden-states stage needs vLLM's extraction config, the draft stage its draft,
    the answers neither (a file for every answer; a draft measured in the training data's answers);
    a speculative config of the user's own in server.args is theirs to keep."""
    if stage is None or not state.up:
        return None
    if not extracts(spec.args):
        if stage == HIDDEN_STATES and not state.extracts:
            return "runs without the extraction config the hidden-states stage needs"
        if stage != HIDDEN_STATES and state.extracts:
            return "runs with the hidden-states extraction config (a file for every answer)"
    if flag_value(spec.args, "--speculative-config") is None:
        if stage == DRAFT and not state.drafts:
            return "runs without the draft the draft stage measures"
        if stage != DRAFT and state.drafts:
            return "runs with the draft stage's draft"
    return None


def stop(conn: Connector, grace: float = GRACE_S) -> ServerStopped:
    return call(conn, ServerStop(grace=grace))


def server_state(conn: Connector, quick: bool = False) -> ServerState:
    """`quick`: whether it is up and for which stage, without the second its rate takes."""
    return call(conn, ServerStatus(quick=quick))
