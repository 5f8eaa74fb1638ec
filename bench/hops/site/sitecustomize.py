"""Loaded by every site-enabled Python that has bench/hops/site on PYTHONPATH; acts only in a runner
(`python -m remote run ...`) when HOPS_OUT is set. Two windows, main thread (other threads tallied
apart, only while a window is open):

start   from the process's first product call until Runner.write_status returns with state
        `running`; calls made under Runner._housekeeping (the quarter-second chores loop, a task
        of its own) are left out and tallied apart -> $HOPS_OUT/runner-<pid>-start.json
recap   from the Runner.check_control call that takes a request carrying recap=True (the poll of
        run/control.json) until DatasetRun.set_target is called for B3 (that call included);
        the rest of that check_control (log line, status.json answer) tallied apart as `tail`.
        check_control is synchronous: nothing else of the runner runs inside it. Polls that take
        nothing are discarded. -> $HOPS_OUT/runner-<pid>-recap-<n>.json
"""

import os
import sys


def _cmdline():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _install(out):
    import atexit
    import threading

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import tracer

    sys.path.pop(0)
    pid = os.getpid()
    S = {"phase": "start", "window": True, "n": 0}
    start = tracer.Tally("runner start")
    house = tracer.Tally("runner start: housekeeping")
    other = tracer.Tally("other threads")
    rc = {}

    def in_housekeeping(frame):
        f = frame
        while f is not None:
            if f.f_code.co_name == "_housekeeping" and f.f_code.co_filename.endswith(
                "job/loop/runner.py"
            ):
                return True
            f = f.f_back
        return False

    def end_start():
        tracer.dump(f"{out}/runner-{pid}-start.json", main=start, housekeeping=house, other=other)

    def new_recap():
        rc.clear()
        rc.update(
            buf=tracer.Tally("runner recap"),
            tail=tracer.Tally("runner recap: after set_target B3"),
            recap=False,
            hit=False,
            depth=0,
        )

    def prof(frame, event, arg):
        code = frame.f_code
        name = tracer.product_name(code)
        if name is None:
            return
        if S["phase"] == "start":
            if event == "call":
                (house if in_housekeeping(frame) else start).add(frame, name)
            elif (
                event == "return"
                and code.co_name == "write_status"
                and name.startswith("remote/job/loop/runner.py")
                and str(getattr(frame.f_locals.get("self"), "state", "")) == "running"
            ):
                end_start()
                S["phase"], S["window"] = "recap", False
                other.__init__("other threads (recap windows)")
            return
        # phase recap
        if not S["window"]:
            if (
                event == "call"
                and code.co_name == "check_control"
                and name.endswith("runner.py:Runner.check_control")
            ):
                new_recap()
                S["window"] = True
                rc["buf"].add(frame, name)
                rc["frame"] = frame
            return
        if event == "call":
            if code.co_name == "recap" and name.endswith("Stage.recap"):  # it took recap=True
                rc["recap"] = True
            if rc["hit"]:
                rc["tail"].add(frame, name)
                return
            rc["buf"].add(frame, name)
            if code.co_name == "set_target" and rc["recap"]:
                run = frame.f_locals.get("self")
                if getattr(getattr(run, "spec", None), "name", None) == "B3":
                    rc["hit"] = True
        elif event == "return" and frame is rc.get("frame"):
            S["window"] = False
            if rc["hit"]:
                S["n"] += 1
                tracer.dump(
                    f"{out}/runner-{pid}-recap-{S['n']}.json",
                    main=rc["buf"],
                    tail=rc["tail"],
                    other=other,
                )
            other.__init__("other threads (recap windows)")

    def prof_other(frame, event, arg):
        if event == "call" and S["window"]:
            name = tracer.product_name(frame.f_code)
            if name is not None:
                other.add(frame, name)

    threading.setprofile(prof_other)
    sys.setprofile(prof)

    def at_exit():
        if S["phase"] == "start":
            end_start()

    atexit.register(at_exit)


_argv = _cmdline()
_out = os.environ.get("HOPS_OUT")
if _out and b"-m" in _argv and b"remote" in _argv and b"run" in _argv:
    _install(_out)
