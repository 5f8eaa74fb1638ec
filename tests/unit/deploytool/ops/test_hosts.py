"""Waiting on the hosts' threads leaves a Ctrl-C to the user: a SIGINT the kernel hands to one of
those threads (not the main one) still stops the wait at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import REPO, ctrl_c_as_typed

SCRIPT = textwrap.dedent(
    """
    import os, signal, threading, time
    from concurrent.futures import Future
    from deploytool.ops.hosts import wait_all

    fut, ready = Future(), threading.Event()

    def host():  # a host's work that outlasts the test: only the Ctrl-C ends the wait
        ready.set()
        time.sleep(3600)

    worker = threading.Thread(target=host, daemon=True)
    worker.start()
    ready.wait()

    def ctrl_c():  # once the main thread sleeps in its wait, the signal goes to the host's thread
        me = f"/proc/{os.getpid()}/task/{os.getpid()}/stat"
        while open(me).read().rsplit(")", 1)[1].split()[0] != "S":
            time.sleep(0.01)
        signal.pthread_kill(worker.ident, signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    try:
        wait_all([fut])
    except KeyboardInterrupt:
        print("interrupted")
    """
)


def test_a_ctrl_c_taken_by_a_hosts_thread_ends_the_wait():
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=ctrl_c_as_typed,
    )
    assert res.stdout.strip() == "interrupted", res.stderr
