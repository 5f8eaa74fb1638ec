"""`invoke restart` vs the three manual commands it replaces, against a local sshd.

    .venv/bin/python bench/bench_restart.py [--repeat 5]

A runner (engine `simulate`, long enough to stay up) is running on the host. Measured, median of N:
  - `deploytool restart --hard --grace 0` (the whole command: stop, stale-process sweep, GPU check,
    start detached, wait until status.json says running), and its SSH round trips;
  - the caps-only `deploytool restart` (live re-cap: the runner keeps running);
  - the manual way: `scp run_inference.py` + `ssh pkill -f run_inference` + `ssh nohup python … &`
    (which only launches: it does not know whether the job came up).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from common import Rig, timed, write_config  # noqa: E402

from deploytool.connectors import connect
from deploytool.ops import control
from deploytool.ops.deploy import deploy_host


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rig = Rig()
    try:
        project = rig.root / "project"
        (project / "data" / "prompts").mkdir(parents=True)
        with open(project / "data" / "prompts" / "B1.jsonl", "w") as f:
            for i in range(100_000):
                f.write(json.dumps({"prompt": f"q{i}"}) + "\n")
        host_dir = rig.root / "host"
        job = {
            "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 2000}},
            "engine": {"kind": "simulate", "concurrency": 64, "tokens_per_s": 20000},
            "sampling": {"max_tokens": 8192},
            "chat_template_kwargs": {},
        }
        cfg = write_config(project, {"gpu": rig.host_entry(host_dir)}, job=job)
        with connect(cfg.hosts["gpu"], cfg) as conn:
            deploy_host(conn, cfg)
            control.restart(conn, control.parse_run_flags(cfg, max_samples=100_000, grace=0))

        cli = [
            sys.executable,
            "-m",
            "deploytool",
            "--config",
            str(cfg.path),
            "restart",
            "--max-samples",
            "100000",
            "--grace",
            "0",
        ]
        t_hard, _ = timed(
            lambda: subprocess.run(cli + ["--hard"], check=True, capture_output=True), a.repeat
        )
        caps = [100_000 - i for i in range(1, a.repeat + 2)]
        it = iter(caps)
        t_live, _ = timed(
            lambda: subprocess.run(
                cli[:-3] + [str(next(it)), "--grace", "0"], check=True, capture_output=True
            ),
            a.repeat,
        )

        with connect(cfg.hosts["gpu"], cfg) as conn:
            conn.round_trips = 0
            t0 = time.perf_counter()
            control.restart(
                conn, control.parse_run_flags(cfg, max_samples=100_000, grace=0), hard=True
            )
            inproc = time.perf_counter() - t0
            trips_hard = conn.round_trips
            conn.round_trips = 0
            control.restart(conn, control.parse_run_flags(cfg, max_samples=99_000, grace=0))
            trips_live = conn.round_trips
            control.stop(conn, grace=0)

        # the manual loop (scp, pkill -f, nohup), against the same sshd
        manual_dir = rig.root / "manual"
        manual_dir.mkdir()
        script = manual_dir / "run_inference.py"
        script.write_text("import time\nwhile True:\n    time.sleep(1)\n")
        target = f"{rig.user}@127.0.0.1"
        ssh = ["ssh", "-p", str(rig.sshd.port), *rig.ssh_opts(), target]
        scp = [
            "scp",
            "-q",
            "-P",
            str(rig.sshd.port),
            *rig.ssh_opts(),
            str(script),
            f"{target}:{manual_dir}/",
        ]
        pattern = (
            f"{manual_dir}/run_[i]nference.py"  # scoped so the benchmark never hits anything else
        )

        def manual():
            subprocess.run(scp, check=True)
            subprocess.run(ssh + [f"pkill -f {pattern}"], check=False)
            # `cd X && nohup … &` would background the whole list in a subshell that keeps the session's
            # output open, and ssh would hang: the classic trap; `;` keeps `&` on nohup alone
            subprocess.run(
                ssh
                + [
                    f"cd {manual_dir}; nohup {sys.executable} {manual_dir}/run_inference.py "
                    f"--max-samples 7000 > run.log 2>&1 < /dev/null &"
                ],
                check=True,
                timeout=60,
            )

        t_manual, _ = timed(manual, a.repeat)
        subprocess.run(ssh + [f"pkill -f {pattern}"], check=False)

        print(f"sshd on 127.0.0.1:{rig.sshd.port}; median of {a.repeat}")
        print(
            f"manual: scp + ssh pkill -f + ssh nohup        {t_manual * 1000:6.0f} ms  (3 SSH connections, "
            "no check that anything started)"
        )
        print(
            f"`deploytool restart --hard --grace 0`         {t_hard * 1000:6.0f} ms  ({t_hard / t_manual:.2f}x manual; "
            f"1 connection, {trips_hard} round trip after it; waits for `running`)"
        )
        print(f"   the same, in-process (no Python start-up)  {inproc * 1000:6.0f} ms")
        print(
            f"`deploytool restart` caps only (live re-cap)  {t_live * 1000:6.0f} ms  ({t_live / t_manual:.2f}x manual; "
            f"{trips_live} round trip; no request lost)"
        )
    finally:
        rig.close()


if __name__ == "__main__":
    main()
