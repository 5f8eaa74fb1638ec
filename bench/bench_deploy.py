"""deploy vs `scp -r` for a 50-file remote/ tree, against a local sshd.

    .venv/bin/python bench/bench_deploy.py [--repeat 5]

Prints the median wall time of: scp -r of the tree; a no-op deploy; a one-file-changed deploy —
each both in-process (connection + work) and as the `deploytool deploy` command (Python start-up
included) — the ratios to scp -r, and the SSH round trips (commands/transfers) each deploy makes.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
from pathlib import Path

from common import REPO, USER_ENV, Rig, timed, write_config  # noqa: E402

from deploytool.connectors import connect  # noqa: E402
from deploytool.ops.deploy import PACKAGE_DIR, build_release, deploy_host  # noqa: E402
from tests.conftest import write_prompts  # noqa: E402


def make_tree(dst: Path, n_files: int = 50) -> Path:
    shutil.copytree(PACKAGE_DIR, dst, ignore=shutil.ignore_patterns("__pycache__"))
    rng = random.Random(0)
    i = 0
    while len([p for p in dst.rglob("*.py")]) < n_files:
        (dst / "extra").mkdir(exist_ok=True)
        (dst / "extra" / f"mod_{i:02d}.py").write_text(
            "".join(f"X_{j} = {rng.random()!r}\n" for j in range(150))
        )
        i += 1
    return dst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rig = Rig()
    try:
        work = rig.root / "work"
        work.mkdir()
        tree = make_tree(work / "remote")
        files = len(list(tree.rglob("*.py")))
        size = sum(p.stat().st_size for p in tree.rglob("*.py"))
        project = work / "project"
        project.mkdir()
        write_prompts(project / "data" / "prompts" / "B1.jsonl", 10)  # the job's (deploy checks it)
        cfg = write_config(project, {"gpu": rig.host_entry(rig.root / "host")})

        scp_dest = rig.root / "scp-dest"
        scp_dest.mkdir()
        scp = [
            "scp",
            "-r",
            "-q",
            "-P",
            str(rig.sshd.port),
            *rig.ssh_opts(),
            str(tree),
            f"{rig.user}@127.0.0.1:{scp_dest}/",
        ]
        t_scp, _ = timed(lambda: subprocess.run(scp, check=True), a.repeat)

        conn = connect(cfg.hosts["gpu"], cfg)
        deploy_host(conn, cfg, release=build_release(cfg, tree))  # first deploy
        conn.close()

        trips = {}

        def noop():
            with connect(cfg.hosts["gpu"], cfg) as c:
                r = deploy_host(c, cfg, release=build_release(cfg, tree))
                assert not r.changed and r.bytes_sent == 0
                trips["noop"] = c.round_trips

        counter = [0]

        def one_file():
            counter[0] += 1
            (tree / "common" / "caps.py").write_text(
                (REPO / "remote" / "common" / "caps.py").read_text() + f"\n# rev {counter[0]}\n"
            )
            with connect(cfg.hosts["gpu"], cfg) as c:
                r = deploy_host(c, cfg, release=build_release(cfg, tree))
                assert r.modified == ["remote/common/caps.py"], r.modified
                trips["one"] = c.round_trips
                trips["one_bytes"] = r.bytes_sent

        t_noop, _ = timed(noop, a.repeat)
        t_one, _ = timed(one_file, a.repeat)

        # the command as a user types it (Python start-up and imports included)
        cli = [sys.executable, "-m", "deploytool", "--config", str(cfg.path), "deploy"]
        subprocess.run(cli, check=True, capture_output=True, env=USER_ENV)
        t_cli_noop, _ = timed(
            lambda: subprocess.run(cli, check=True, capture_output=True, env=USER_ENV), a.repeat
        )

        print(
            f"tree: {files} files, {size / 1024:.0f} KiB; sshd on 127.0.0.1:{rig.sshd.port}; median of {a.repeat}"
        )
        print(f"scp -r                       {t_scp * 1000:7.0f} ms   1.00x")
        print(
            f"deploy, no-op (in-process)   {t_noop * 1000:7.0f} ms   {t_noop / t_scp:.2f}x   "
            f"{trips['noop']} round trip(s) after connect, 0 bytes of file data"
        )
        print(
            f"deploy, one file changed     {t_one * 1000:7.0f} ms   {t_one / t_scp:.2f}x   "
            f"{trips['one']} round trip(s) after connect, {trips['one_bytes']} bytes of file data"
        )
        print(
            f"`deploytool deploy` no-op    {t_cli_noop * 1000:7.0f} ms   {t_cli_noop / t_scp:.2f}x   "
            "(the whole command: Python start-up, imports, config, connect; this repo's remote/)"
        )
    finally:
        rig.close()


if __name__ == "__main__":
    main()
