"""Which hosts.yaml a command reads: --config, else $DEPLOYTOOL_CONFIG, else the project's."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_ENV = "DEPLOYTOOL_CONFIG"


def project_config(cwd: Path | None = None) -> Path | None:
    """The hosts.yaml of the project this folder is in: here, else the nearest folder above (as
    invoke finds tasks.py by walking up, so `invoke status` works from any subdirectory)."""
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "hosts.yaml").is_file():
            return d / "hosts.yaml"
    return None


def find_config(explicit: str | None = None) -> Path:
    """--config, else $DEPLOYTOOL_CONFIG, else the project's hosts.yaml (see project_config)."""
    given = explicit or os.environ.get(CONFIG_ENV)
    return Path(given) if given else (project_config() or Path("hosts.yaml"))
