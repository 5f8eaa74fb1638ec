"""The laptop command under the hop counter: `python bench/hops/laptop.py <deploytool args>` is
`python -m deploytool <args>`; counts go to $HOPS_OUT/laptop-<pid>.json at exit."""

import atexit
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# as `python -m`: bench/hops is not on the path (only for importing tracer)
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(HERE)]
sys.path.insert(0, HERE)
import tracer  # noqa: E402

sys.path.pop(0)
out = os.environ["HOPS_OUT"]
main, other = tracer.simple("laptop", mark_on_return="deploytool/ops/control.py:call")
atexit.register(lambda: tracer.dump(f"{out}/laptop-{os.getpid()}.json", main=main, other=other))
sys.argv = ["deploytool", *sys.argv[1:]]
runpy.run_module("deploytool", run_name="__main__", alter_sys=True)
