"""Before anything is stopped: can the host's Python run the job's engine at all, and does every
server the job talks to serve the model the job names?

Standard library only and free of package imports: `invoke hosts` sends this file as the source of
`python -c` (like release.py), so it answers on a host where nothing is deployed yet. ctl imports it.
Imports are checked in a child of the same interpreter, without `-S`, exactly as the runner will be
started (ctl itself runs with `-S`, so it cannot see site-packages)."""

from __future__ import annotations

import json
import subprocess
import sys

ENGINE_MODULES = {"openai": ("aiohttp",), "simulate": ()}  # what each imports beyond the stdlib
# remote.common.wire.ExitCode.OK, which this file, sent alone, cannot import
# (tests/unit/remote/common/test_wire.py holds it equal)
EXIT_OK = 0

# A module is imported in full once: after that, while the file it loads from is the same (path,
# mtime, size, in the same interpreter), finding it is enough. Importing aiohttp costs a third of
# a second of CPU on every restart; a reinstall or upgrade rewrites the file and is imported again.
PROBE = """import json, os, sys
from importlib.util import find_spec
known = json.loads(sys.argv[1])
missing, seen = {}, {}
for name in sys.argv[2:]:
    try:
        spec = find_spec(name)
        mark = None
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            st = os.stat(spec.origin)
            mark = [sys.executable, spec.origin, st.st_mtime_ns, st.st_size]
        if mark is None or known.get(name) != mark:
            __import__(name)
        seen[name] = mark
    except Exception as e:
        missing[name] = f"{type(e).__name__}: {e}"
print(json.dumps({"missing": missing, "seen": seen}))"""


def probe_modules(modules, python: str = sys.executable, known: dict | None = None):
    """({module: why} for each module `python` cannot import, {module: the mark of the file it
    imported from}); a module whose mark is in `known` is only found, not imported again."""
    if not modules:
        return {}, {}
    res = subprocess.run(
        [python, "-c", PROBE, json.dumps(known or {}), *modules],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        out = json.loads(res.stdout.strip().splitlines()[-1])
        return out["missing"], out["seen"]
    except (ValueError, IndexError, KeyError, TypeError):
        why = (res.stderr.strip().splitlines() or ["the import check failed"])[-1]
        return {m: why for m in modules}, {}


def engine_problem(kind: str, python: str = sys.executable, known: dict | None = None):
    """(None when `python` can run this engine, else what is missing (the caller words the fix);
    the marks of the modules it found, for `known` next time)."""
    missing, seen = probe_modules(ENGINE_MODULES.get(kind, ()), python, known)
    if not missing:
        return None, seen
    return {"python": python, "engine": kind, "missing": missing}, seen


def served_models(url: str, api_key: str = "", timeout: float = 5.0) -> list[str] | None:
    """The model ids a server answers to (GET {base_url}/models), or None when it does not answer
    (not started yet, or down: the runner waits for such a server; nothing to judge here)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"{url}/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data = json.loads(r.read()).get("data", [])
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None


def model_problem(engine: dict, urls: list[str], environ: dict) -> dict | None:
    """None when every answering server of `urls` serves job.engine.model; else {model, served:
    {url: ids}}. vLLM answers requests for any other name `404 The model X does not exist`, for
    every prompt."""
    if engine.get("kind", "openai") != "openai":
        return None
    key_env = engine.get("api_key_env") or "OPENAI_API_KEY"
    model = engine.get("model", "default")
    wrong = {}
    for url in urls:
        ids = served_models(url, environ.get(key_env, ""))
        if ids is not None and model not in ids:
            wrong[url] = ids
    return {"model": model, "served": wrong} if wrong else None


def model_message(problem: dict, where: str = "job.engine.model") -> str:
    served = "; ".join(
        f"{u} serves {', '.join(ids) or 'nothing'}" for u, ids in problem["served"].items()
    )
    first = next(iter(problem["served"].values()))
    fix = f"set {where} to {first[0]!r}" if first else f"check {where}"
    return (
        f"{where} {problem['model']!r} is not served: {served} (--served-model-name decides the "
        f"name): {fix}"
    )


def main(argv: list[str]) -> int:
    """`python -c <this file> ENGINE_JSON URLS_JSON`: one JSON line for `invoke hosts`."""
    import os
    import platform

    engine, urls = json.loads(argv[0]), json.loads(argv[1])
    kind = engine.get("kind", "openai")
    wrong = model_problem(engine, urls, dict(os.environ))
    print(
        json.dumps(
            {
                "node": platform.node(),
                "version": sys.version.split()[0],
                "executable": sys.executable,
                "missing": probe_modules(ENGINE_MODULES.get(kind, ()))[0],
                "model": model_message(wrong) if wrong else None,
            }
        )
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
