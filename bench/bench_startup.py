"""The whole `deploytool` command as a user types it (Python start-up, imports, config, connect), against
`scp -r` of the same tree, on a tree the size of a real release: this repo's remote/ plus prompt files.

    .venv/bin/python bench/bench_startup.py [--repeat 7] [--prompt-mib 4]

1. `deploytool deploy`, no-op and one file changed (an `est_tokens` edit in hosts.yaml: job.json changes),
   vs `scp -r` of remote/ + data/prompts/ over the same loopback sshd. Median of --repeat runs.
2. `deploytool status` on the `local` host (no SSH: the host side still runs as its own process).
3. What the imports cost: `import deploytool.collection`, and invoke alone.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys

from common import REPO, USER_ENV, Rig, timed, write_config  # noqa: E402

from tests.conftest import base_job  # noqa: E402


def make_prompts(dst, mib: float, datasets=8) -> list[str]:
    rng = random.Random(0)
    per = int(mib * (1 << 20) / datasets)
    names = []
    for d in range(1, datasets + 1):
        path = dst / "data" / "prompts" / f"B{d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            size, i = 0, 0
            while size < per:
                words = " ".join(
                    rng.choice(("alpha", "beta", "gamma", "delta", "prompt", "tokens"))
                    for _ in range(60)
                )
                line = (
                    json.dumps(
                        {"id": f"B{d}-{i:06d}", "messages": [{"role": "user", "content": words}]}
                    )
                    + "\n"
                )
                f.write(line)
                size += len(line)
                i += 1
        names.append(f"B{d}")
    return names


def imports(repeat: int) -> None:
    def t(code):
        run = [sys.executable, "-c", code]
        return timed(lambda: subprocess.run(run, check=True, env=USER_ENV), repeat)[0]

    base = t("pass")
    inv = t("import invoke")
    tasks = t("import deploytool.collection")
    para = t("import paramiko, fabric")
    print(
        f"3. python -c pass {base * 1000:.0f} ms; + import invoke {(inv - base) * 1000:.0f} ms; "
        f"+ import deploytool.collection {(tasks - base) * 1000:.0f} ms (invoke included); "
        f"paramiko+fabric, imported only when an SSH host is used, would add {(para - base) * 1000:.0f} ms"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--prompt-mib", type=float, default=4.0)
    a = ap.parse_args()
    rig = Rig()
    try:
        project = rig.root / "project"
        project.mkdir()
        names = make_prompts(project, a.prompt_mib)
        datasets = {n: {"prompts": f"data/prompts/{n}.jsonl", "est_tokens": 1000} for n in names}
        hosts = {
            "gpu": rig.host_entry(rig.root / "host"),
            "local": {"connect": "local", "remote_dir": str(rig.root / "lh")},
        }
        cfg = write_config(project, hosts, job=base_job(datasets=datasets))
        tree = rig.root / "tree"
        shutil.copytree(
            REPO / "remote", tree / "remote", ignore=shutil.ignore_patterns("__pycache__")
        )
        shutil.copytree(project / "data", tree / "data")
        files = [p for p in tree.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)

        dest = rig.root / "scp-dest"
        dest.mkdir()
        scp = [
            "scp",
            "-r",
            "-q",
            "-P",
            str(rig.sshd.port),
            *rig.ssh_opts(),
            str(tree / "remote"),
            str(tree / "data"),
            f"{rig.user}@127.0.0.1:{dest}/",
        ]
        t_scp, _ = timed(lambda: subprocess.run(scp, check=True), a.repeat)

        cli = [sys.executable, "-m", "deploytool", "--config", str(cfg.path)]
        subprocess.run(
            cli + ["deploy", "--host", "gpu,local"], check=True, capture_output=True, env=USER_ENV
        )
        t_noop, _ = timed(
            lambda: subprocess.run(
                cli + ["deploy", "--host", "gpu"], check=True, capture_output=True, env=USER_ENV
            ),
            a.repeat,
        )
        rev = [1000]

        def one_file():
            rev[0] += 1
            write_config(
                project,
                hosts,
                job=base_job(
                    datasets=dict(
                        datasets, B1={"prompts": "data/prompts/B1.jsonl", "est_tokens": rev[0]}
                    )
                ),
            )
            out = subprocess.run(
                cli + ["deploy", "--host", "gpu"],
                check=True,
                capture_output=True,
                env=USER_ENV,
                text=True,
            ).stdout
            assert "modified job.json" in " ".join(out.split()), out

        t_one, _ = timed(one_file, a.repeat)
        subprocess.run(
            cli + ["restart", "--host", "local", "--max-samples", "2"],
            check=True,
            capture_output=True,
        )
        subprocess.run(cli + ["tail", "--host", "local"], capture_output=True, env=USER_ENV)
        t_status, runs = timed(
            lambda: subprocess.run(
                cli + ["status", "--host", "local"], check=True, capture_output=True, env=USER_ENV
            ),
            a.repeat,
        )
        print(
            f"tree: remote/ + data/prompts/: {len(files)} files, {size / (1 << 20):.1f} MiB; loopback sshd; "
            f"median of {a.repeat}"
        )
        print(f"1. scp -r                        {t_scp * 1000:6.0f} ms  1.00x")
        print(f"   `deploytool deploy` no-op     {t_noop * 1000:6.0f} ms  {t_noop / t_scp:.2f}x")
        print(f"   `deploytool deploy` one file  {t_one * 1000:6.0f} ms  {t_one / t_scp:.2f}x")
        print(
            f"2. `deploytool status` (local)   {t_status * 1000:6.0f} ms  (min {min(runs) * 1000:.0f}, "
            f"max {max(runs) * 1000:.0f})"
        )
        imports(a.repeat)
    finally:
        rig.close()


if __name__ == "__main__":
    main()
