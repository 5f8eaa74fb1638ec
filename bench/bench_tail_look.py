"""What one look of `tail` costs, now that it asks the host's own view of the job (`ctl status`,
kept running there: a line in, one answer out) instead of reading status.json and watch.json
itself; beside it, the same look as `invoke status` makes it (a Python started on the host per
look). Over a real sshd on 127.0.0.1 to a deployed host folder, with a status file of eight
datasets.

    .venv/bin/python bench/bench_tail_look.py [--looks 50]

Prints, for each way, the median milliseconds a look takes, as this side waits for it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from common import Rig, timed  # noqa: E402  (puts the repository on the path)

from deploytool.connectors import connect  # noqa: E402
from deploytool.ops.control import Asking, call  # noqa: E402
from deploytool.ops.deploy import deploy_host  # noqa: E402
from remote.common.protocol import CtlStatus  # noqa: E402
from remote.common.status import DatasetStatus, JobStatus  # noqa: E402
from tests.conftest import write_config, write_prompts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--looks", type=int, default=50)
    args = ap.parse_args()
    rig = Rig()
    try:
        work = Path(tempfile.mkdtemp(prefix="deploytool-bench-tail-"))
        host = work / "host"
        write_prompts(work / "data" / "prompts" / "B1.jsonl", 3)
        cfg = write_config(work, {"gpu": rig.host_entry(host)})
        with connect(cfg.hosts["gpu"], cfg) as conn:
            deploy_host(conn, cfg)
            st = JobStatus(state="running", updated_at=time.time())
            st.datasets = {f"B{i}": DatasetStatus(done=i, target=7000) for i in range(1, 9)}
            (host / "run" / "status.json").write_text(json.dumps(st.to_dict()))
            asking = Asking(conn, CtlStatus(again=True))
            asking.ask()  # asked once, then the kept process started: once per tail
            asking.ask()
            kept, _ = timed(asking.ask, args.looks)
            asking.close()
            started, _ = timed(lambda: call(conn, CtlStatus()), args.looks)
        print(f"a look, ctl status kept running (tail):        {kept * 1000:.1f} ms")
        print(f"a look, a Python started each time (status):    {started * 1000:.1f} ms")
    finally:
        rig.close()


if __name__ == "__main__":
    main()
