"""`python -S bench/hops/boot.py --request` (via pywrap.sh) is `python -S -m remote --request` under
the hop counter: counts to $HOPS_OUT/request-<pid>.json at exit, with the request's command."""

import atexit
import io
import json
import os
import runpy
import sys

sys.path[0] = os.path.dirname(os.path.abspath(__file__))
import tracer  # noqa: E402

sys.path[0] = os.getcwd()  # as `python -m remote` run in the release
out = os.environ["HOPS_OUT"]
data = sys.stdin.read() if sys.argv[1:] == ["--request"] else ""
try:
    command = json.loads(data)["command"] if data else sys.argv[1:]
except ValueError:
    command = None
sys.stdin = io.StringIO(data) if data else sys.stdin
main, other = tracer.simple("request " + " ".join(map(str, command or [])))
atexit.register(
    lambda: tracer.dump(
        f"{out}/request-{os.getpid()}.json", command=command, main=main, other=other
    )
)
sys.argv = ["remote", *sys.argv[1:]]
runpy.run_module("remote", run_name="__main__", alter_sys=True)
