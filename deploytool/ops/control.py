"""The one way deploytool asks a host anything (`call(conn, request)`: `python -m remote ...` from its
current release, the typed answer back), and restart / stop / status on top of it: flags validated
here, decided and done on the host."""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future, wait
from contextlib import suppress
from typing import TYPE_CHECKING

from remote.common.caps import repeated
from remote.common.flags import Request
from remote.common.protocol import GRACE_S, CtlKeys, CtlRestart, CtlStatus, CtlStop, RunArgs
from remote.common.recover import RecoverSpec
from remote.common.status import JobView
from remote.common.wire import (
    FAULTS,
    REQUEST_FLAG,
    Fault,
    ProtocolError,
    from_wire,
    read_envelope,
    request_json,
)
from remote.common.words import suggest

from ..config import Config, ServerSpec
from ..connectors import Connector
from ..connectors.base import Result, quote_path
from ..errors import DeployToolError, ExitCode, RemoteError, UsageError

if TYPE_CHECKING:  # types only: answers load with the commands that build them
    from remote.common.answers import PreflightProblem, RestartAnswer, StopAnswer


def parse_run_flags(config: Config, **raw) -> RunArgs:
    """The runner's flags as typed, checked against hosts.yaml before any host is touched."""
    try:
        flags = RunArgs.from_text(**raw)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if twice := repeated(name for name, _ in flags.cap):  # the last would win without a word
        given = " and ".join(f"{n}={v}" for n, v in flags.cap if n == twice)
        raise UsageError(f"--cap gives {twice} twice ({given}): give each dataset once")
    known = config.job.dataset_names()
    unknown = [n for n in flags.named_datasets() if n not in known]
    if unknown:
        raise UsageError(
            f"unknown dataset {', '.join(unknown)}{suggest(unknown[0], known)}; hosts.yaml has "
            f"{', '.join(known)} (a new one goes under job.datasets there, then `invoke deploy`)"
        )
    return flags


def _argv(conn: Connector) -> list[str]:
    """`python -m remote --request`, run from the host's current release."""
    # nothing deployed (no remote_dir, or no release in it) is an exit code of each, never a
    # shell's words read back from stderr
    none, gone = f"exit {ExitCode.NO_REMOTE_DIR:d}", f"exit {ExitCode.NOT_DEPLOYED:d}"
    script = f"cd {quote_path(conn.remote_dir)} 2>/dev/null || {none}; [ -d current ] || {gone}; "
    script += 'cd current && exec "$@"'
    return ["sh", "-c", script, "sh", *conn.python("-S", "-m", "remote", REQUEST_FLAG)]


def call(conn: Connector, request: Request, timeout: float | None = None, started=None):
    """Run `python -m remote --request` from the host's current release, the request as typed data
    on its stdin; its typed answer, or a RemoteError with the host's fault (message, fix, log
    lines). `started()` is called once the host has the command (it then runs to its end whatever
    happens here)."""
    data = request_json(request)
    if started is None:
        return _answer(conn, request, conn.run(_argv(conn), timeout=timeout, stdin=data))
    proc = conn.start(_argv(conn))
    proc.write(data)
    proc.close_stdin()
    started()
    return _answer(conn, request, proc.finish())


class Asking:
    """A request with `again` (`ctl status`) answered at each `ask()` by one host process kept
    running (a line in, its answer out): a look every second costs the host no Python started each
    time. The process ends when its input closes: `close()`, or this side gone, a dropped
    connection included."""

    def __init__(self, conn: Connector, request: Request, asked: bool = False):
        """`asked`: the host has just answered another request of this release (its protocol is
        known): the first look is the kept process's already."""
        self.conn, self.request, self.proc, self.asked = conn, request, None, asked

    def ask(self):
        if not self.asked:
            # asked once first: a host of another release reads a request to the end of its
            # input, and would wait for ever on one kept open; asked once, it says so
            answer = call(self.conn, dataclasses.replace(self.request, again=False))
            self.asked = True
            return answer
        try:
            if self.proc is None:
                self.proc = self.conn.start(_argv(self.conn))
                self.proc.write(request_json(self.request) + b"\n")
            else:
                self.proc.write(b"\n")
            line = self.proc.readline()
        except DeployToolError:  # a connection lost with it: the next look starts anew
            self.proc, self.asked = None, False
            raise
        if line.strip():
            try:
                return _answer(self.conn, self.request, Result(0, line, b""))
            except DeployToolError:
                self.close()  # a fault is the host's last word
                raise
        proc, self.proc, self.asked = self.proc, None, False
        return _answer(self.conn, self.request, proc.finish())  # how it ended: an error

    def close(self) -> None:
        """Its input closed: the host process ends once its look in hand is answered, and no one
        waits for that (a Ctrl-C detaches at once). A connection gone took the process with it."""
        proc, self.proc, self.asked = self.proc, None, False
        if proc is not None:
            with suppress(DeployToolError):
                proc.close_stdin()


def _answer(conn: Connector, request: Request, res: Result):
    """The typed answer on the last line of `res`, or a RemoteError that says why there is none."""
    if res.exit_code == ExitCode.NOT_DEPLOYED:
        raise RemoteError(f"nothing deployed in {conn.remote_dir}: run `invoke deploy` first")
    if res.exit_code == ExitCode.NO_REMOTE_DIR:  # a typo there would start a job from nothing
        raise RemoteError(
            f"nothing deployed in {conn.remote_dir}, no such folder on the host (a typo in "
            "hosts.yaml's remote_dir? a job deployed before is in another folder): run "
            "`invoke deploy` first to start one there"
        )
    what = " ".join(request.command)
    try:
        answer = read_envelope(res.answer(), type(request).answer_type())
    except ProtocolError as e:
        raise RemoteError(f"`remote {what}`: {e}") from None
    except ValueError:
        raise RemoteError(f"`remote {what}` failed (exit {res.exit_code}): {res.why()}") from None
    if isinstance(answer, Fault):
        code = FAULTS.get(answer.code)  # bad input stays bad input: exit 2
        raise RemoteError(fault_message(conn.name, answer), code, details=answer.log)
    if hasattr(answer, "host"):
        answer.host = conn.name
    return answer


def fault_message(host: str, f: Fault) -> str:
    if f.code == "preflight":
        from remote.common.answers import PreflightProblem

        problem = from_wire(PreflightProblem, f.detail["problem"])
        return "nothing was stopped: " + preflight_message(host, problem)
    return f"{f.message}: {f.fix}" if f.fix else f.message


def preflight_message(host: str, problem: PreflightProblem) -> str:
    """One line with the fix, for a host whose Python cannot run the job's engine."""
    mods = ", ".join(problem.missing)
    why = "; ".join(problem.missing.values())
    return (
        f"the host's python ({problem.python}) cannot import {mods} ({why}), which job.engine.kind "
        f"{problem.engine} needs: point hosts.{host}.python (or defaults.python) at the Python of the "
        "vLLM environment (e.g. ~/vllm-venv/bin/python)"
    )


def restart(
    conn: Connector,
    flags: RunArgs,
    *,
    hard=False,
    drain=False,
    dry_run=False,
    force_gpu=False,
    recover: RecoverSpec | None = None,
    keys: dict[str, str] | None = None,
    server: ServerSpec | None = None,
    keep_server=False,
    on_status=None,
) -> RestartAnswer:
    """`keys`: the API keys of the job's servers (Config.server_keys), stored on the host for the
    runner before it starts; sent on stdin, never on a command line. `server`: hosts.yaml's, where
    the job's engine is that server (the host starts it, or again for the stage, first: the answer
    is then `switching`, and the host goes on alone); `keep_server`: never (--no-server). `on_status`:
    as `follow_while`'s, while the host works (a runner it stops first is said as `stop` says it)."""
    if keys and not dry_run:
        call(conn, CtlKeys(keys=keys))
    rec = recover.to_dict() if recover is not None else None
    req = CtlRestart(
        **vars(flags),
        recover=rec,
        hard=hard,
        drain=drain,
        dry_run=dry_run,
        force_gpu=force_gpu,
        server=server,
        keep_server=keep_server,
    )
    if on_status is None:
        return call(conn, req)
    return follow_while(
        conn, on_status, lambda sent: call(conn, req, started=sent), look_first=False
    )


def stop(conn: Connector, grace: float = GRACE_S, drain: bool = False, started=None) -> StopAnswer:
    return call(conn, CtlStop(grace=grace, drain=drain), started=started)


def stop_and_follow(conn: Connector, grace: float, drain: bool, on_status) -> StopAnswer:
    """`stop`, saying what it does while the host waits (see `follow_while`)."""
    return follow_while(conn, on_status, lambda sent: stop(conn, grace, drain, sent))


def follow_while(conn: Connector, on_status, act, look_first: bool = True):
    """`act(sent)` (a host command that calls `sent()` once the host has it), saying what the job
    does while the host works: `on_status(status, seconds waited)` once before (status None where it
    could not be read; not `look_first`: no look before) and then every second until the answer
    (one within the first second: no look at all)."""
    looks = Asking(conn, CtlStatus(again=True))

    def look():
        try:
            return looks.ask()
        except DeployToolError:
            return None

    sent = threading.Event()
    first = look() if look_first else None
    t0 = time.monotonic()
    answer = in_thread(f"told {conn.name}", act, sent.set)
    answer.add_done_callback(lambda _: sent.set())
    # the host has the stop before anything is said: a Ctrl-C from the first line on detaches at
    # once (this runs in a host's thread; the Ctrl-C is the main thread's), the host goes on alone
    sent.wait(30)
    if look_first:
        on_status(first, 0.0)
    try:
        while wait([answer], timeout=1.0).not_done:
            on_status(look(), time.monotonic() - t0)
    finally:
        looks.close()
    return answer.result()


def in_thread(name: str, fn, *args) -> Future:
    """fn(*args) in a daemon thread: a Ctrl-C (the main thread's) leaves at once, the host's work
    goes on there without us (a pool's threads would be waited for at exit, as long as a stop's
    grace period)."""
    fut: Future = Future()

    def work():
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # handed to the caller's thread
            fut.set_exception(e)

    threading.Thread(target=work, name=name, daemon=True).start()
    return fut


def job_status(conn: Connector, config: Config | None = None) -> JobView:
    """The job's status; with `config`, whether its hosts.yaml's job is the one deployed."""
    st = call(conn, CtlStatus())
    if config is not None:
        st.job_differs = differs(config, conn.name, st.deployed_job)
    return st


def differs(config: Config, host: str, deployed: str | None) -> bool:
    """hosts.yaml's job for `host` is not the one its current release holds (None: none deployed;
    a config read for its hosts alone has no job to compare)."""
    if config.hosts_only:
        return False
    return deployed is not None and deployed != config.job_for(host).fingerprint()
