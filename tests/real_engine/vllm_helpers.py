"""Reading a real vLLM's server and the job's status, for the real-engine tests."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from remote.common import metrics
from tests.conftest import (
    status,
    wait_for,
)


def server_metric(metrics_url: str, name: str, timeout: float) -> float:
    """One series of a real vLLM's /metrics as it says it now, summed over engines (the product's
    own reader); 0 where it has none."""
    with urllib.request.urlopen(metrics_url, timeout=timeout) as r:
        return metrics.total(metrics.parse(r.read().decode()), name) or 0.0


def flat(text: str) -> str:
    return " ".join(text.split())


def wait_status(host_dir: Path, pred, what: str, timeout: float) -> dict:
    """Poll run/status.json until pred(status) holds; on time-out say what the status was."""
    seen = {}

    def check():
        seen.update(status(host_dir))
        return pred(seen)

    try:
        wait_for(check, timeout=timeout, interval=0.2, what=what)
    except AssertionError as e:
        keys = ("state", "message", "in_flight", "datasets", "endpoints")
        raise AssertionError(f"{e}: {json.dumps({k: seen.get(k) for k in keys})}") from None
    return seen


def server_record(host_dir: Path) -> dict:
    return json.loads((host_dir / "run" / "server.pid").read_text())
