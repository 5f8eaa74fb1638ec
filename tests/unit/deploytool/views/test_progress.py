"""What status and tail say of a recovery: recovering, gave up, unsupervised."""

from __future__ import annotations

from remote.common.status import ProcessWatch


def test_status_and_tail_say_recovering_gave_up_and_unsupervised():
    import io

    from rich.console import Console

    from deploytool.views import progress, render
    from remote.common.status import JobStatus, Supervision

    st = JobStatus(state="running", host="gpu1")
    st.supervision = Supervision(
        enabled=True,
        supervised=True,
        pid=7,
        server=ProcessWatch(
            state="backoff", why="the server process is gone", attempt=2, of=5, next_try_in_s=20
        ),
        runner=ProcessWatch(state="watching", restarts=1, last_cause="the runner (pid 9) died"),
        note="a reboot needs `invoke restart`",
    )
    buf = io.StringIO()
    render.status_screen(st, Console(file=buf, width=200, highlight=False), now=0)
    text = buf.getvalue()
    assert (
        "RECOVERING server: the server process is gone; attempt 2 of 5, next try in 0m20s" in text
    )
    assert "runner restarted 1x by the watcher; last cause: the runner (pid 9) died" in text
    line = progress.plain_line("gpu1", st, 0)
    assert (
        "RECOVERING server" in line and "reboot" not in line
    )  # tail's plain line: only what matters
    st.supervision = Supervision(
        enabled=True,
        server=ProcessWatch(
            state="fatal", why="gave up", log=["CUDA error: an illegal memory access"]
        ),
        note="unsupervised: the watcher is not running; `invoke restart` brings it back",
    )
    lines = [t for t, _ in progress.recovery_lines(st)]
    assert lines[0] == "GAVE UP on the server: gave up" and "illegal memory access" in lines[1]
    assert lines[-1].startswith("unsupervised")
