"""`ctl status`: status.json with the runner looked up (alive, its release, strays) and the
watcher's view. Read-only, and asked every few seconds by `invoke status` and `tail`, so it imports
only what looking needs: nothing that starts or stops a process."""

from __future__ import annotations

import os

from ...common.jobspec import JOB_FILE, Paths
from ...common.protocol import CtlStatus
from ...common.state import job_now
from ...common.status import JobStatus
from ..facts.strays import stray_runners
from ..watcher import watch


def job_status(paths: Paths, req: CtlStatus | None = None) -> JobStatus:
    st = job_now(paths)
    try:
        current = os.readlink(paths.root / "current")
    except OSError:
        current = None
    st.current_release = current
    st.deployed_job = deployed_job(paths)
    st.strays = stray_runners(paths, {st.runner.pid} if st.runner.alive else set())
    st.supervision = watch.supervision(paths)
    st.token = None
    return st


def deployed_job(paths: Paths) -> str | None:
    """The sha256 of the job the current release holds (None: nothing deployed)."""
    import hashlib

    try:
        return hashlib.sha256((paths.root / "current" / JOB_FILE).read_bytes()).hexdigest()
    except OSError:
        return None
