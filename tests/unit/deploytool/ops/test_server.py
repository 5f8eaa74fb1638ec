"""server.start's wait, on an injected clock: it asks the host to wait for the server in looks of
up to 15 s (each one SSH command, not one every poll) until it answers (then a smoke test), says
what the log says every 15 s, gives up at ready_timeout with the server left running, says a death
during start-up with the log's lines, takes a headless worker alive for a while as ready (looked at
every poll: it answers nothing), and waits for a start already under way (the watcher's) as for its
own."""

from __future__ import annotations

import pytest

from deploytool.errors import RemoteError
from deploytool.ops import server
from remote.common.answers import ServerChecked, ServerStarted, SmokeAnswer
from remote.common.jobspec import ServerSpec
from remote.common.protocol import ServerCheck, ServerSmoke, ServerStart


class Host:
    """Answers server start / check / smoke from a script; the clock moves when slept, and by a
    check's wait_s when its scripted look is of a server alive and loading (the host waited)."""

    name = "gpu1"

    def __init__(self, checks, started=None):
        self.checks, self.started = list(checks), started or ServerStarted(pid=7)
        self.now, self.asked, self.slept, self.waits = 100.0, [], [], []

    def call(self, conn, req):
        self.asked.append(type(req).__name__)
        if isinstance(req, ServerStart):
            return self.started
        if isinstance(req, ServerCheck):
            self.waits.append(req.wait_s)
            look = self.checks.pop(0)
            if look.alive and not look.ready:
                self.now += req.wait_s
            return look
        assert isinstance(req, ServerSmoke)
        return SmokeAnswer(answer="Hello", model="tiny")

    def clock(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


LOADING = ServerChecked(
    alive=True, log=["(APIServer pid=4242) INFO 12-02 00:45:21 [api.py:12] Loading weights"]
)


def start(monkeypatch, host, spec=None, said=None):
    monkeypatch.setattr(server, "call", host.call)
    return server.start(
        host, spec or ServerSpec(model="tiny"), poll=2.0,
        progress=said.append if said is not None else (lambda line: None),
        clock=host.clock, sleep=host.sleep,
    )  # fmt: skip


def test_the_host_waits_for_it_in_looks_of_15s_until_ready_then_smoke_tests(monkeypatch):
    host = Host([LOADING] * 3 + [ServerChecked(alive=True, ready=True)])
    said = []
    got = start(monkeypatch, host, said=said)
    assert got.ready_after_s == 45.0 and got.smoke == "Hello" and got.served_model == "tiny"
    assert host.asked == ["ServerStart"] + ["ServerCheck"] * 4 + ["ServerSmoke"]
    assert host.waits == [15.0] * 4 and host.slept == []  # waited there, never polled from here
    # said at once, then every 15 s of the clock: vLLM's log line without its prefix
    assert said == ["gpu1: loading tiny: 0s of up to 1800s"] + [
        f"gpu1: loading tiny: {s}s of up to 1800s · Loading weights" for s in (15, 30, 45)
    ]


def test_at_ready_timeout_it_gives_up_and_leaves_the_server_running(monkeypatch):
    host = Host([LOADING] * 100)
    with pytest.raises(RemoteError) as e:
        start(monkeypatch, host, ServerSpec(model="tiny", ready_timeout=40))
    assert str(e.value).startswith("the server is not ready after 40s (server.ready_timeout)")
    assert "`invoke server.stop` to give up" in str(e.value) and host.now == 142.0
    assert e.value.details == tuple(LOADING.log)
    # the last wait is what is left of ready_timeout; with nothing left, a look and a poll
    assert host.waits == [15.0, 15.0, 10.0, 0.0, 0.0] and host.slept == [2.0]


def test_a_death_during_start_up_is_said_with_the_logs_last_lines(monkeypatch):
    dead = ServerChecked(alive=False, log=["CUDA out of memory"])
    with pytest.raises(RemoteError) as e:
        start(monkeypatch, Host([LOADING, LOADING, dead]))
    assert (
        str(e.value)
        == "the server died during start-up after 30s: CUDA out of memory (logs/server.log)"
    )
    assert e.value.details == ("CUDA out of memory",)


def test_a_headless_worker_alive_a_while_is_ready_without_a_smoke_test(monkeypatch):
    early = ServerChecked(alive=True, ready=True, headless=True, elapsed_s=1.0)
    settled = ServerChecked(alive=True, ready=True, headless=True, elapsed_s=5.0)
    host = Host([early, early, settled])
    got = start(monkeypatch, host, ServerSpec(model="tiny", headless=True))
    assert got.headless and "ServerSmoke" not in host.asked and got.ready_after_s == 4.0
    assert host.waits == [0.0] * 3 and host.slept == [2.0, 2.0]


def test_a_start_already_under_way_is_waited_for_and_one_ready_is_left_alone(monkeypatch):
    busy = ServerStarted(already=True, by="watcher", pid=9, up_s=12.0)
    host = Host([LOADING, ServerChecked(alive=True, ready=True)], started=busy)
    said = []
    got = start(monkeypatch, host, said=said)
    assert got.waited and said[0] == (
        "gpu1: the server is starting (pid 9, started by the watcher 12s ago): waiting for it"
    )
    host = Host([ServerChecked(alive=True, ready=True)], started=ServerStarted(already=True, pid=9))
    assert not start(monkeypatch, host).waited and host.asked == ["ServerStart", "ServerCheck"]


def test_a_log_line_is_shown_without_vllms_prefix_and_cut_at_a_word():
    assert server.log_gist("WARNING 12-02 00:45:21 [x.py:1] low memory") == "low memory"
    long = "(EngineCore pid=1) INFO 12-02 00:45:21 [x.py:1] " + "word " * 40
    cut = server.log_gist(long)
    assert cut.endswith(" …") and len(cut) <= server.GIST_CHARS + 2 and "pid" not in cut


def test_a_death_during_start_up_is_said_by_this_starts_error_never_an_earlier_ones(monkeypatch):
    log = ["==== 10:00 starting: vllm serve a", "ValueError: an earlier start's error"]
    log += ["==== 10:05 starting: vllm serve b", "ERROR [core.py] ValueError: vocab size differs"]
    with pytest.raises(RemoteError) as e:
        start(monkeypatch, Host([ServerChecked(alive=False, log=log)]))
    assert "after 0s: ERROR [core.py] ValueError: vocab size differs (logs" in str(e.value)
    with pytest.raises(RemoteError) as e:  # no error line of its own: its last line
        start(monkeypatch, Host([ServerChecked(alive=False, log=log[:-1] + ["bye"])]))
    assert "earlier" not in str(e.value) and "after 0s: bye (logs" in str(e.value)
