"""`ctl status`: status.json with the runner looked up (alive, its release, strays) and the
watcher's view. Read-only, and asked every few seconds by `invoke status` and `tail`, so it imports
only what looking needs: nothing that starts or stops a process."""

from __future__ import annotations

import os

from ...common import procinfo
from ...common.jobspec import JOB_FILE, Paths
from ...common.protocol import CtlStatus
from ...common.state import StageSwitch, job_now, kept_caps
from ...common.status import JobView
from ..facts.made_with import mixed_settings, release_made_with
from ..facts.strays import stray_runners
from ..watcher import watch

STARTING_S = 10.0


def job_status(paths: Paths, req: CtlStatus | None = None) -> JobView:
    st = job_now(paths)
    try:
        current = os.readlink(paths.root / "current")
    except OSError:
        current = None
    st.current_release = current
    st.deployed_job = deployed_job(paths)
    st.settings_differ = settings_differ(paths, st)
    if st.settings_differ:  # a rollback that would run: named (a plain one may not have them)
        st.settings_release = release_made_with(paths, kept_caps(paths), st.settings_differ)
    strays = stray_runners(paths, {st.runner.pid} if st.runner.alive else set())
    # a runner writes its pid file once it holds the lock, a second or so after its start: one
    # younger than that is being started (by the watcher, a restart), not a stray to warn of
    st.strays = [p for p in strays if (age := procinfo.age_s(p)) is None or age >= STARTING_S]
    st.supervision = watch.supervision(paths)
    if st.settings_differ and (st.supervision.note or "").endswith(watch.BROUGHT_BACK):
        # that restart is refused until the settings agree: the release line says how
        st.supervision.note += " once the deployed settings agree with the records' (see above)"
    sw = StageSwitch.read(paths.switch)
    st.switch = sw.view() if sw is not None else None
    st.token = None
    return st


def settings_differ(paths: Paths, st: JobView) -> list[str]:
    """The datasets a runner of the deployed release would refuse to open (their records made with
    other settings), where that release is not the one that runs or ran: its restart is the one to
    say a way for (looked up only then: a look a second must not read every dataset's settings)."""
    ran = (st.runner.release if st.runner and st.runner.alive else None) or st.release
    deployed = st.current_release
    if not deployed or not ran or os.path.basename(ran.rstrip("/")) == os.path.basename(deployed):
        return []
    flying = st.answering(st.runner.pid if st.runner and st.runner.alive else None)
    job = paths.root / "current" / JOB_FILE
    return list(mixed_settings(paths, kept_caps(paths), job, flying))  # as the restart reckons


def deployed_job(paths: Paths) -> str | None:
    """The sha256 of the job the current release holds (None: nothing deployed)."""
    import hashlib

    try:
        return hashlib.sha256((paths.root / "current" / JOB_FILE).read_bytes()).hexdigest()
    except OSError:
        return None
