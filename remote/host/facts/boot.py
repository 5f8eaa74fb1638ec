"""recover.on_boot: a systemd unit that starts the watcher after a reboot (it then restarts the server
and the runner from run/supervise.json). Only where the host runs systemd and the user opted in;
a system unit as root, a user unit otherwise (which needs `loginctl enable-linger` to start at boot)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ...common.jobspec import Paths


def systemd_running() -> bool:
    return os.path.isdir("/run/systemd/system") and shutil.which("systemctl") is not None


NO_SYSTEMD = "recover.on_boot is set, but this host does not run systemd"


def unit_name(paths: Paths) -> str:
    return f"deploytool-watch-{hashlib.sha1(str(paths.root).encode()).hexdigest()[:10]}.service"


def unit_path(paths: Paths) -> Path:
    if os.getuid() == 0:
        return Path("/etc/systemd/system") / unit_name(paths)
    return Path.home() / ".config" / "systemd" / "user" / unit_name(paths)


def unit_text(paths: Paths, python: str) -> str:
    target = "multi-user.target" if os.getuid() == 0 else "default.target"
    return (
        "[Unit]\n"
        f"Description=deploytool watcher for {paths.root}\n"
        "After=network-online.target\n\n"
        "[Service]\n"
        "Type=simple\n"
        f"WorkingDirectory={paths.root / 'current'}\n"
        f"ExecStart={python} -m remote watch --root {paths.root}\n"
        f"StandardOutput=append:{paths.watcher_log}\n"
        f"StandardError=append:{paths.watcher_log}\n\n"
        "[Install]\n"
        f"WantedBy={target}\n"
    )


def installed(paths: Paths) -> bool:
    return systemd_running() and unit_path(paths).exists()


def install(paths: Paths, python: str) -> str | None:
    """Write and enable the unit; returns why not, or None when it is in place."""
    if not systemd_running():
        return NO_SYSTEMD
    path = unit_path(paths)
    text = unit_text(paths, python)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    user = [] if os.getuid() == 0 else ["--user"]
    for args in (["daemon-reload"], ["enable", unit_name(paths)]):
        r = subprocess.run(["systemctl", *user, *args], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return f"systemctl {' '.join(args)} failed: {r.stderr.strip()[:200]}"
    return None
