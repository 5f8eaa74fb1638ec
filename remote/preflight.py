"""Before anything is stopped: can the host's Python run the job's engine at all?

Checked by importing in a child of the same interpreter, without `-S`, exactly as the runner will be
started (ctl itself runs with `-S`, so it cannot see site-packages)."""

from __future__ import annotations

import subprocess
import sys

ENGINE_MODULES = {
    "openai": ("aiohttp",),
    "simulate": (),
}  # what each engine imports beyond the stdlib

PROBE = """import json, sys
missing = {}
for name in sys.argv[1:]:
    try:
        __import__(name)
    except Exception as e:
        missing[name] = f"{type(e).__name__}: {e}"
print(json.dumps(missing))"""


def missing_modules(modules, python: str = sys.executable) -> dict[str, str]:
    """{module: why} for each module `python` cannot import; empty when all import."""
    if not modules:
        return {}
    res = subprocess.run(
        [python, "-c", PROBE, *modules], capture_output=True, text=True, timeout=120
    )
    try:
        import json

        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {
            m: (res.stderr.strip().splitlines() or ["the import check failed"])[-1] for m in modules
        }


def engine_problem(kind: str, python: str = sys.executable) -> dict | None:
    """None when `python` can run this engine; else what is missing (the caller words the fix)."""
    missing = missing_modules(ENGINE_MODULES.get(kind, ()), python)
    if not missing:
        return None
    return {"python": python, "engine": kind, "missing": missing}
