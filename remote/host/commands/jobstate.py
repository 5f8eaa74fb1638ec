"""`ctl status`: status.json with the runner looked up (alive, its release, strays) and the
watcher's view. Read-only, and asked every few seconds by `invoke status` and `tail`, so it imports
only what looking needs: nothing that starts or stops a process."""

from __future__ import annotations

import os

from ...common import procinfo
from ...common.codec import read_json
from ...common.jobspec import JOB_FILE, Paths, deployed_spec, settings_changed
from ...common.protocol import CtlStatus
from ...common.state import StageSwitch, job_now
from ...common.status import JobView
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
    st.settings_differ = settings_differ(paths)
    strays = stray_runners(paths, {st.runner.pid} if st.runner.alive else set())
    # a runner writes its pid file once it holds the lock, a second or so after its start: one
    # younger than that is being started (by the watcher, a restart), not a stray to warn of
    st.strays = [p for p in strays if (age := procinfo.age_s(p)) is None or age >= STARTING_S]
    st.supervision = watch.supervision(paths)
    sw = StageSwitch.read(paths.switch)
    st.switch = sw.view() if sw is not None else None
    st.token = None
    return st


def settings_differ(paths: Paths) -> list[str]:
    """The datasets whose records were made with other settings than the deployed job's."""
    job = deployed_spec(paths.root / "current" / JOB_FILE)
    if job is None:
        return []
    out = []
    for ds in job.datasets:
        meta = read_json(paths.meta(ds.name))
        has = paths.output(ds.name).exists() and paths.output(ds.name).stat().st_size > 0
        if meta and has and settings_changed(meta, job.settings(ds)):
            out.append(ds.name)
    return out


def deployed_job(paths: Paths) -> str | None:
    """The sha256 of the job the current release holds (None: nothing deployed)."""
    import hashlib

    try:
        return hashlib.sha256((paths.root / "current" / JOB_FILE).read_bytes()).hexdigest()
    except OSError:
        return None
