"""tail's driver: the job as `invoke status` sees it (and optionally runner.log) over one kept-open
connection per host.

Asks the host's `ctl status`, kept running there, once a second, and reads only new log bytes,
from the log's last lines on as `tail -f` does (a job's log of days is no screen's start);
reconnects with backoff when a connection drops, without losing its place in the log; Ctrl-C
detaches and never touches the job. Each host's look runs in a thread of its own with a deadline:
a host that does not answer (sshd alive, its disk stalled) is said unreachable and holds no other
host up. What each tick shows is the view's (views/tail.py).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Callable

from remote.common.protocol import CtlStatus
from remote.common.status import NEVER_RUN, JobState, JobView

from ..config import Config, HostConfig
from ..connectors import Connector, connect
from ..errors import ConnectError, DeployToolError, ExitCode
from .control import Asking, differs, in_thread

SIGNATURE = 64  # first bytes of the log: a different head means the file was rotated
TAIL_LINES = 20  # of the log already written, shown first
TAIL_BYTES = 64 << 10  # looked back for them: a log of long lines shows fewer, never a flood
# a look takes milliseconds (the first, which starts the host's Python, about a second): one not
# answered in this long is a host that does not answer, said so while the others go on
LOOK_DEADLINE_S = 10.0


def clock_time(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


@dataclass
class HostWatch:
    """One host's connection, last view of the job and log position."""

    host: HostConfig
    config: Config | None
    conn: Connector | None = None
    status: JobView | None = None
    note: str | None = None
    failures: int = 0
    retry_at: float = 0.0
    log_offset: int | None = None
    log_head: bytes = b""
    log_partial: bytes = b""
    asking: Asking | None = None  # `ctl status`, kept running on the host: a look a line
    look: Future | None = None  # the look in flight, in a thread: a hung host holds up no other
    asked_at: float = 0.0
    down_since: float | None = None  # when it stopped answering (unanswered look, lost connection)
    run_look: Callable = field(default=in_thread, repr=False)  # (name, fn) -> Future
    say: Callable = field(default=lambda text, host: text, repr=False)  # a hint as typed for it

    @property
    def base(self) -> str:
        return (self.conn.remote_dir if self.conn else self.host.remote_dir).rstrip("/")

    def _conn(self) -> Connector:
        if self.conn is None:
            self.conn = connect(self.host, self.config)
        return self.conn

    def _unreachable(self, since: float, why: str) -> None:
        """Said as one host's trouble: its last view stays on screen, the others go on."""
        if self.down_since is None:
            self.down_since = since
        self.note = f"unreachable since {clock_time(self.down_since)}: {why}"

    def _failed(self, e: Exception, now: float) -> None:
        self.failures += 1
        delay = min(30.0, 0.5 * 2 ** (self.failures - 1))
        self.retry_at = now + delay
        self._unreachable(now, f"connection lost ({e}); reconnecting in {delay:.0f}s")
        self.asking = None  # its process ended with the connection
        if self.conn is not None:
            self.conn.close()

    def send(self, now: float) -> None:
        """The job as `invoke status` sees it (the host's own view: the runner and the watcher
        looked up there), asked in a thread of its own; none while a look is still out."""
        if self.look is not None or now < self.retry_at:
            return
        if self.asking is None:
            self.asking = Asking(self._conn(), CtlStatus(again=True))
        self.asked_at = now
        self.look = self.run_look(f"look {self.host.name}", self.asking.ask)

    def overdue(self, now: float, deadline: float = LOOK_DEADLINE_S) -> bool:
        return self.look is not None and now - self.asked_at >= deadline

    def take(self, now: float, deadline: float = LOOK_DEADLINE_S) -> None:
        """The answer of the look in flight, if it came; one past its deadline says the host
        unreachable (kept in flight: its answer, whenever it comes, is the host back)."""
        if self.look is None:
            return
        if not self.look.done():
            if self.overdue(now, deadline):
                waited = f"{now - self.asked_at:.0f}s"
                self._unreachable(self.asked_at, f"its look has not answered in {waited}")
            return
        look, self.look = self.look, None
        try:
            st = look.result()
            self.failures, self.down_since, self.note = 0, None, None
            if st.state == NEVER_RUN:
                self.note = self.say(
                    "no run/status.json yet: start the job with `invoke restart`", self.host.name
                )
                return
            if self.config is not None:  # as `invoke status` sets it: the laptop's to know
                st.job_differs = differs(self.config, self.host.name, st.deployed_job)
            self.status = st
        except ConnectError as e:
            self._failed(e, now)
        except DeployToolError as e:  # it answered: with an error
            self.down_since, self.note = None, self.say(str(e), self.host.name)

    def poll_status(self, now: float, deadline: float = LOOK_DEADLINE_S) -> None:
        """One look, waited for up to its deadline (`now` and on: a clock that runs from it)."""
        t0 = time.monotonic()
        clock = lambda: now + time.monotonic() - t0  # noqa: E731
        look_all([self], clock, deadline=deadline)

    def poll_log(self, now: float) -> list[str]:
        """runner.log's last lines at the first call, then its new complete lines since the last
        one; none twice, none skipped."""
        if now < self.retry_at:
            return []
        path = f"{self.base}/logs/runner.log"
        try:
            conn = self._conn()
            lines: list[str] = []
            head = b"".join(conn.read_range(path, 0, SIGNATURE))
            if self.log_offset is None:
                self.log_head = head
                lines += self._last_lines(conn, path)
            elif self.log_head and head[: len(self.log_head)] != self.log_head:
                # rotated: finish the old file (renamed to .1) from our offset, then the new one from 0
                try:
                    old_head = b"".join(conn.read_range(path + ".1", 0, len(self.log_head)))
                    if old_head == self.log_head:
                        lines += self._take(
                            b"".join(conn.read_range(path + ".1", self.log_offset, 1 << 40)),
                            final=True,
                        )
                except DeployToolError:
                    pass
                self.log_offset, self.log_head, self.log_partial = 0, head, b""
            elif not self.log_head:
                self.log_head = head
            data = b"".join(conn.read_range(path, self.log_offset, 1 << 40))
            lines += self._take(data)
            self.failures = 0
            return lines
        except ConnectError as e:
            self._failed(e, now)
            return []
        except DeployToolError:
            if self.log_offset is None:  # no log yet: one that appears is new, shown whole
                self.log_offset = 0
            return []

    def _last_lines(self, conn: Connector, path: str) -> list[str]:
        """The log's last TAIL_LINES complete lines; the offset put after what was read."""
        size = conn.size(path)
        start = max(0, size - TAIL_BYTES)
        self.log_offset = start
        lines = self._take(b"".join(conn.read_range(path, start, size - start)))
        return (lines[1:] if start else lines)[-TAIL_LINES:]  # a window's first line is cut

    def _take(self, data: bytes, final: bool = False) -> list[str]:
        self.log_offset += len(data)
        buf = self.log_partial + data
        *complete, rest = buf.split(b"\n")
        self.log_partial = b"" if final else rest
        out = [c.decode("utf-8", "replace") for c in complete]
        if final and rest:
            out.append(rest.decode("utf-8", "replace"))
        return out

    def close(self) -> None:
        if self.asking is not None:
            self.asking.close()  # a look still out ends with its input; nobody waits for it
        if self.conn is not None:
            self.conn.close()


def settle(watches: list[HostWatch], clock, deadline: float = LOOK_DEADLINE_S, wait=wait_futures):
    """Until every look in flight has answered or passed its deadline (by `clock`, from when it
    was sent): a look already past it is waited for no more, so a hung host costs the others one
    deadline, once, and then nothing."""
    while True:
        now = clock()
        due = [w for w in watches if w.look is not None and not w.look.done()]
        due = [w for w in due if not w.overdue(now, deadline)]
        if not due:
            return
        wait([w.look for w in due], timeout=min(deadline - (now - w.asked_at) for w in due))


def look_all(watches: list[HostWatch], clock, deadline: float = LOOK_DEADLINE_S, wait=wait_futures):
    """One look at every host at once; each host's answer (or its silence) taken."""
    now = clock()
    for w in watches:
        w.send(now)
    settle(watches, clock, deadline, wait)
    now = clock()
    for w in watches:
        w.take(now, deadline)


def exit_code(statuses: list[JobView | None]) -> int | None:
    """None while any host still runs; then 0 if every job finished, else 1."""
    if any(s is None or not s.job_ended for s in statuses):
        return None
    return ExitCode.OK if all(s.state == JobState.FINISHED for s in statuses) else ExitCode.FAILED


def watch(
    config: Config,
    hosts: list[HostConfig],
    view,
    *,
    once: bool = False,
    log: bool = False,
    out=None,
    clock=time.time,
    sleep=time.sleep,
    max_seconds: float | None = None,
    say=lambda text, hosts: text,
    deadline: float = LOOK_DEADLINE_S,
    wait=wait_futures,
) -> int:
    """The tail loop: poll every host, let `view` draw (views/tail.py), stop when every job has
    ended. `out` is a rich Console. Returns the exit code (0 every job finished, 1 one failed or
    stopped)."""
    watches = [HostWatch(h, config, say=say) for h in hosts]
    started = clock()
    try:
        if not once and not log:
            look_all(watches, clock, deadline, wait)
            answered = [w.status is None and w.down_since is None and w.note for w in watches]
            if all(answered):
                # every host answered and none has ever run the job: nothing would ever end the watch
                for w in watches:
                    out.print(f"{w.host.name}: {w.note}", markup=False)
                return ExitCode.FAILED
        with view:
            while True:
                now = clock()
                if not log:
                    look_all(watches, clock, deadline, wait)
                    now = clock()
                view.show(watches, now)
                if log:
                    look_all(watches, clock, deadline, wait)
                code = exit_code([w.status for w in watches])
                if once:  # answers as the live view does: a host with no job to show is a failure
                    if any(w.status is None for w in watches):
                        return ExitCode.FAILED
                    return code or 0
                if code is not None:
                    view.finish(watches, clock())
                    return code
                if max_seconds is not None and clock() - started > max_seconds:
                    return ExitCode.OK
                sleep(1.0)
    except KeyboardInterrupt:
        hint = "detached; the job keeps running (`invoke tail` to watch again, `invoke stop` to stop it)"
        names = ",".join(h.name for h in hosts)
        out.print(say(hint, names), markup=False)
        return ExitCode.OK
    finally:
        for w in watches:
            w.close()
