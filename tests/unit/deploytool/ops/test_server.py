"""server.start and a restart's server swap, as the laptop follows them, on an injected clock: the
host waits for the load (and smoke tests it) and this only looks, through one kept look, saying the
load every 15 s with the log's last line; a swap that failed is said with its fix and the host's
log lines, one whose process is gone says the watcher takes it up, and a start already under way
(the watcher's) is waited for as its own. The wait itself: unit/remote/host/processes/
test_stage_switch."""

from __future__ import annotations

import pytest

from deploytool.errors import RemoteError
from deploytool.ops import server
from remote.common.answers import ServerStarted
from remote.common.jobspec import ServerSpec
from remote.common.protocol import ServerStart
from remote.common.status import JobView, SwitchStep, SwitchView
from remote.common.wire import to_wire

LINE = "(APIServer pid=4242) INFO 12-02 00:45:21 [api.py:12] Loading weights"


class Host:
    """Answers server start from a script, and each look of the kept one with the next view of
    the swap; the clock moves by the look's `every` when slept."""

    name = "gpu1"

    def __init__(self, views, started=None):
        self.views, self.started = list(views), started
        self.now, self.asked, self.closed = 100.0, [], False

    def call(self, conn, req):
        assert isinstance(req, ServerStart)
        self.asked.append(req)
        return self.started

    def asking(self, conn, req, asked=False):
        host = self

        class Looks:
            def ask(self):
                return JobView(switch=host.views.pop(0))

            def close(self):
                host.closed = True

        return Looks()

    def clock(self):
        return self.now

    def sleep(self, s):
        self.now += s


def swap(step=SwitchStep.LOADING, **kw) -> SwitchView:
    return SwitchView(
        token="t1", stage="generate", model="tiny", ready_timeout=1800, step=step, **kw
    )


READY = to_wire(ServerStarted(ready_after_s=45.0, smoke="Hello", served_model="tiny"))


def start(monkeypatch, host, notes=None):
    monkeypatch.setattr(server, "call", host.call)
    monkeypatch.setattr(server, "Asking", host.asking)
    return server.start(
        host, ServerSpec(model="tiny"), poll=1.0,
        progress=notes.append if notes is not None else (lambda line: None),
        clock=host.clock, sleep=host.sleep,
    )  # fmt: skip


def test_the_host_waits_for_the_load_and_this_says_it_every_15s(monkeypatch):
    views = [swap(step=SwitchStep.BEGUN)] + [swap(log_line=LINE)] * 46
    views.append(swap(step=SwitchStep.DONE, server_started=READY))
    host = Host(views, started=ServerStarted(pid=7, switch=swap(step=SwitchStep.BEGUN)))
    notes = []
    got = start(monkeypatch, host, notes=notes)
    assert (got.pid, got.ready_after_s, got.smoke, got.served_model) == (7, 45.0, "Hello", "tiny")
    assert got.switch is None and host.closed and len(host.asked) == 1
    # said at its first look at the load, then every 15 s: vLLM's log line without its prefix
    assert notes == [
        f"gpu1: loading tiny: {s}s of up to 1800s · Loading weights" for s in (0, 15, 30, 45)
    ]


def test_one_up_and_answering_is_left_alone_and_one_starting_is_waited_for(monkeypatch):
    host = Host([], started=ServerStarted(already=True, pid=9))
    got = start(monkeypatch, host)
    assert got.already and not got.waited and host.views == [] and not host.closed
    busy = ServerStarted(already=True, by="watcher", pid=9, up_s=12.0, switch=swap())
    host = Host([swap(step=SwitchStep.DONE, server_started=READY)], started=busy)
    notes = []
    got = start(monkeypatch, host, notes=notes)
    assert (
        got.waited
        and got.smoke == "Hello"
        and notes
        == ["gpu1: the server is starting (pid 9, started by the watcher 12s ago): waiting for it"]
    )


def test_a_swap_that_failed_is_said_with_its_fix_and_the_hosts_log(monkeypatch):
    failed = swap(
        step=SwitchStep.FAILED,
        error="the server is not ready after 40s (server.ready_timeout); it is still running",
        fix="`invoke server.status` to watch, `invoke server.stop` to give up",
        log=[LINE],
    )
    host = Host([swap(), failed], started=ServerStarted(pid=7, switch=swap()))
    with pytest.raises(RemoteError) as e:
        start(monkeypatch, host)
    assert str(e.value).startswith("the server is not ready after 40s (server.ready_timeout)")
    assert str(e.value).endswith("`invoke server.stop` to give up") and e.value.details == (LINE,)
    assert host.closed


def test_a_swap_whose_process_is_gone_or_that_another_replaced_is_said_so(monkeypatch):
    gone = swap(alive=False)
    host = Host([gone], started=ServerStarted(pid=7, switch=swap()))
    with pytest.raises(RemoteError, match="is gone \\(at: loading\\); the watcher takes it up"):
        start(monkeypatch, host)
    other = SwitchView(token="t2", stage="baseline")
    host = Host([other], started=ServerStarted(pid=7, switch=swap()))
    with pytest.raises(RemoteError, match="replaced by another command's"):
        start(monkeypatch, host)
    # the one before the swap now under way: still found, by its token
    ended = swap(step=SwitchStep.DONE, server_started=READY).to_dict()
    host = Host([SwitchView(token="t2", before=ended)], started=ServerStarted(switch=swap()))
    assert start(monkeypatch, host).smoke == "Hello"


def test_a_log_line_is_shown_without_vllms_prefix_and_cut_at_a_word():
    assert server.log_gist("WARNING 12-02 00:45:21 [x.py:1] low memory") == "low memory"
    long = "(EngineCore pid=1) INFO 12-02 00:45:21 [x.py:1] " + "word " * 40
    cut = server.log_gist(long)
    assert cut.endswith(" …") and len(cut) <= server.GIST_CHARS + 2 and "pid" not in cut
