"""`ctl status` on a host folder in tmp: status.json as the runner left it, a runner gone without
saying so called stopped, the runner's own token never shown."""

from __future__ import annotations

import os

from remote.common import procinfo
from remote.common.jobspec import Paths
from remote.common.state import RunnerRecord
from remote.common.status import JobState, JobStatus
from remote.host.commands.jobstate import job_status


def test_no_status_file_is_a_job_never_run(tmp_path):
    st = job_status(Paths(tmp_path))
    assert st.state == "never run" and not st.runner.alive and st.strays == []


def test_a_runner_gone_without_writing_its_status_is_stopped(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    JobStatus(state=JobState.RUNNING, pid=123, token="secret").write(paths.status)
    st = job_status(paths)
    assert st.state == JobState.STOPPED and "gone without writing its status" in st.message
    assert st.token is None  # the runner's token stays on the host


def test_a_live_runner_is_looked_up_and_its_state_kept(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    me = os.getpid()  # stands in for the runner: its record names a live process
    RunnerRecord(pid=me, start_time=procinfo.start_time(me), token="t", release="r1").write(
        paths.pidfile
    )
    JobStatus(state=JobState.RUNNING, pid=me).write(paths.status)
    os.symlink("releases/r1", paths.root / "current")
    st = job_status(paths)
    assert st.state == JobState.RUNNING and st.runner.alive and st.runner.pid == me
    assert (st.runner.release, st.current_release) == ("r1", "releases/r1")


def test_a_runner_being_started_is_no_stray_until_it_has_had_a_starts_seconds(
    tmp_path, monkeypatch
):
    """A runner writes its pid file as it starts: one the watcher (or a restart) has just started
    has none yet, and is not warned of as a stray; one that still has none later is."""
    from remote.host.commands import jobstate

    age = {"s": 1.0}
    monkeypatch.setattr(jobstate, "stray_runners", lambda paths, exclude: [4242])
    monkeypatch.setattr(jobstate.procinfo, "age_s", lambda pid: age["s"])
    assert job_status(Paths(tmp_path)).strays == []
    age["s"] = jobstate.STARTING_S
    assert job_status(Paths(tmp_path)).strays == [4242]
    age["s"] = None  # an age that cannot be read hides no stray
    assert job_status(Paths(tmp_path)).strays == [4242]


def test_a_job_nothing_brings_back_names_a_restart_only_with_the_settings_it_needs(
    tmp_path, monkeypatch
):
    """Runner and watcher killed, the deployed release of other sampling: status said `invoke
    restart brings it back`, and that restart was refused (the records' settings differ)."""
    from remote.host.commands import jobstate
    from remote.host.facts import intent

    paths = Paths(tmp_path)
    paths.ensure()
    JobStatus(state=JobState.RUNNING, pid=123).write(paths.status)
    intent.change(paths, runner={"wanted": True})
    note = job_status(paths).supervision.note
    assert note.endswith("`invoke restart` brings it back"), note
    monkeypatch.setattr(jobstate, "settings_differ", lambda paths, st: ["B1"])
    monkeypatch.setattr(jobstate, "release_made_with", lambda paths, caps, names: "r0")
    note = job_status(paths).supervision.note
    assert note.endswith(
        "brings it back once the deployed settings agree with the records' (see above)"
    )
