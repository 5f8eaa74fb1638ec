"""What the server commands print: a start (fresh, found up, waited for, headless), a stop (its
GPU memory freed or still held), a status (down, died, leftovers, engines gone, the server's own
numbers), rendered into a console of its own."""

from __future__ import annotations

import io

from rich.console import Console

from deploytool.views import render_server as r
from remote.common.answers import (
    GpuApp,
    GpuFreed,
    LeftoverProcess,
    ServerStarted,
    ServerState,
    ServerStopped,
)
from remote.common.status import ServerMetrics

ENGINE = LeftoverProcess(pid=41, what="VLLM::EngineCore", rss_mib=900, gpu_mib=70000)


def printed(fn, answer) -> str:
    buf = io.StringIO()
    fn(answer, out=Console(file=buf, width=300, highlight=False))
    return " ".join(buf.getvalue().split())


def test_a_start_says_what_runs_how_long_it_took_and_what_the_smoke_test_got():
    started = ServerStarted(
        host="gpu1", pid=7, port=8000, model="kimi", argv=["vllm", "serve", "kimi"],
        env={"VLLM_API_KEY": "***"}, ready_after_s=95, smoke="Hello", served_model="kimi",
        removed=[ENGINE],
    )  # fmt: skip
    out = printed(r.server_started, started)
    assert out.startswith("gpu1: removed 1 leftover processes of the dead server first: pid 41")
    assert "(900 MiB RAM, 70000 MiB GPU)" in out
    assert "gpu1: server up: pid 7, kimi on port 8000, ready after 1m35s" in out
    assert "command: vllm serve kimi" in out and "env: VLLM_API_KEY=***" in out
    assert "smoke test: 'Hello' (asked as 'kimi')" in out
    up = printed(
        r.server_started, ServerStarted(host="gpu1", already=True, pid=7, model="kimi", port=1)
    )
    assert up == "gpu1: server already up (pid 7, kimi on port 1)"
    waited = ServerStarted(
        host="g", already=True, waited=True, by="watcher", pid=7, ready_after_s=3
    )
    assert "server up: pid 7 (started by the watcher)" in printed(r.server_started, waited)
    headless = printed(r.server_started, ServerStarted(host="g", pid=7, headless=True))
    assert "headless worker" in headless and "no smoke test" in headless


def test_a_stop_says_whether_the_gpu_memory_is_free():
    stopped = ServerStopped(host="g", was_running=True, pid=7, killed=[8], gpu=GpuFreed())
    assert (
        printed(r.server_stopped, stopped)
        == "g: server pid 7 stopped; SIGKILL: [8]; its GPU memory is free"
    )
    held = ServerStopped(host="g", was_running=True, pid=7, gpu=GpuFreed(False, [GpuApp(pid=99)]))
    assert printed(r.server_stopped, held).endswith("GPU memory still held by [99]")
    assert printed(r.server_stopped, ServerStopped(host="g", was_running=True, pid=7)).endswith(
        "no nvidia-smi (GPU memory not checked)"
    )
    assert printed(r.server_stopped, ServerStopped(host="g")) == "g: no server was running"
    assert "removed 1 leftover processes of a dead one: pid 41" in printed(
        r.server_stopped, ServerStopped(host="g", removed=[ENGINE])
    )


def test_a_status_names_what_is_wrong_and_the_servers_own_numbers():
    assert printed(r.server_status, ServerState(host="g")) == "g: server down"
    assert "(it died: nobody stopped it" in printed(
        r.server_status, ServerState(host="g", died=True)
    )
    left = printed(r.server_status, ServerState(host="g", leftovers=[ENGINE]))
    assert "1 processes of the dead server are still running: pid 41" in left
    assert "`invoke server.stop` removes them" in left
    up = ServerState(
        host="g", up=True, ready=True, pid=7, port=8000, model="kimi", uptime_s=3600,
        engines_gone=[ENGINE],
        metrics=ServerMetrics(running=3, waiting=None, kv_cache=0.42, generation_tokens_per_s=1500),
    )  # fmt: skip
    out = printed(r.server_status, up)
    assert "g: server up: pid 7, kimi on port 8000, uptime 1h00m" in out
    assert "but its engine processes are gone: pid 41 (VLLM::EngineCore)" in out
    assert "requests running 3, waiting ?; KV cache 42%; generation 1.5k tok/s" in out
    starting = ServerState(host="g", up=True, pid=7, headless=True, uptime_s=5)
    assert "server starting: pid 7" in printed(r.server_status, starting)
    assert "as a headless data-parallel worker" in printed(r.server_status, starting)


def test_a_broken_group_is_said_line_by_line():
    buf = io.StringIO()
    r.group_problems(["a", "b"], out=Console(file=buf, width=100, highlight=False))
    assert buf.getvalue().splitlines() == [
        "data-parallel group broken: a",
        "data-parallel group broken: b",
    ]
