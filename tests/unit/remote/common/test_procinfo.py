import fcntl
import os
import signal
import subprocess
import sys

from remote.common import procinfo

# holds a lock, then keeps four threads busy: on a kill the first thread ends before the others
_THREADED = r"""
import fcntl, os, sys, threading, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""


def _lock_is_free(path) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_killed_process_is_alive_until_its_last_thread_has_let_go_of_its_files(tmp_path):
    lock = tmp_path / "lock"
    for _ in range(20):  # the first thread ends first in most kills here: one kill could miss it
        p = subprocess.Popen([sys.executable, "-c", _THREADED, str(lock)], stdout=subprocess.PIPE)
        try:
            assert p.stdout.readline() == b"ready\n"
            assert procinfo.alive(p.pid)
            os.kill(p.pid, signal.SIGKILL)
            while procinfo.alive(p.pid):
                pass
            assert _lock_is_free(lock)
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
        assert not procinfo.alive(p.pid)


def test_a_process_that_is_gone_or_never_was_is_not_alive():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not procinfo.alive(p.pid)
    assert procinfo.state(p.pid) is None and procinfo.start_time(p.pid) is None
