"""The runner's own process: one per remote_dir (a second is refused, naming the first), its pid
record found again by pid + start time + token, a log that survives a full disk."""

from __future__ import annotations

import os

import pytest

from remote.common import procinfo
from remote.common.jobspec import Paths
from remote.common.state import RunnerRecord
from remote.job.loop.own_process import LockHeld, Log, acquire_lock, write_pidfile


def test_a_second_runner_is_refused_while_the_first_holds_the_lock(tmp_path):
    paths = Paths(tmp_path / "root")
    fd = acquire_lock(paths)
    write_pidfile(paths, "tok-1", ["run", "--max-samples", "5"])
    with pytest.raises(LockHeld, match=f"already running in {paths.root} \\(pid {os.getpid()}\\)"):
        acquire_lock(paths)
    os.close(fd)  # what the kernel does on kill -9
    os.close(acquire_lock(paths))


def test_the_pid_record_names_this_process(tmp_path):
    paths = Paths(tmp_path / "root")
    paths.ensure()
    write_pidfile(paths, "tok-1", ["run"])
    rec = RunnerRecord.read(paths.pidfile)
    assert (rec.pid, rec.token, rec.argv, rec.root) == (
        os.getpid(),
        "tok-1",
        ["run"],
        str(paths.root),
    )
    assert rec.start_time == procinfo.start_time(os.getpid()) and rec.alive()


def test_the_log_stamps_lines_and_a_full_disk_does_not_stop_the_job(tmp_path, capsys, monkeypatch):
    log = Log(tmp_path / "logs" / "runner.log", echo=True)
    log("started")
    assert (tmp_path / "logs" / "runner.log").read_text().endswith(" started\n")
    assert capsys.readouterr().err.endswith(" started\n")

    class Full:
        def write(self, _):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(log, "f", Full())
    log("still here")  # no exception
    assert "still here" in capsys.readouterr().err
