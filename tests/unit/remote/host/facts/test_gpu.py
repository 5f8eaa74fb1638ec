"""The GPU check (nvidia-smi's compute apps, read through a stand-in): refused, in one line naming
each process, when memory is held by one that is not the server's; skipped, said so, without
nvidia-smi. And who listens on a port, read from /proc for a real socket."""

from __future__ import annotations

import os
import socket

import pytest

from remote.host.facts import gpu
from remote.host.facts.gpu import GPUBusy, check, listener_pids


def test_memory_held_by_the_servers_own_processes_is_no_reason_to_refuse(monkeypatch):
    monkeypatch.setattr(gpu, "compute_apps", lambda: [{"pid": 11, "used_mib": 70000}])
    report = check(allowed={11})
    assert report.checked and [a.pid for a in report.apps] == [11] and report.blocking == []


def test_another_process_on_the_gpu_is_refused_unless_forced(monkeypatch):
    me = os.getpid()
    monkeypatch.setattr(gpu, "compute_apps", lambda: [{"pid": me, "used_mib": 1234}])
    with pytest.raises(GPUBusy) as e:
        check(allowed=set())
    assert f"pid {me} (1234 MiB: " in e.value.fault.message and "python" in e.value.fault.message
    assert "--force-gpu" in e.value.fault.fix and e.value.fault.code == "gpu_busy"
    forced = check(allowed=set(), force=True)
    assert [b.pid for b in forced.blocking] == [me]


def test_no_nvidia_smi_skips_the_check_and_says_so(monkeypatch):
    monkeypatch.setattr(gpu, "compute_apps", lambda: None)
    report = check(allowed=set())
    assert not report.checked and "no nvidia-smi" in report.note


def test_the_listener_of_a_port_is_found_and_a_closed_port_has_none():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        assert os.getpid() in listener_pids(port)
    finally:
        s.close()
    assert listener_pids(port) == set()
