"""Before anything stops: the host's Python can import what the engine needs (checked in a child, as
the runner will start), and every server that answers serves the job's model (a real HTTP server on
127.0.0.1 that wants a key)."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from remote.host.preflight import (
    engine_problem,
    model_message,
    model_problem,
    probe_modules,
)


def test_a_module_the_python_cannot_import_is_named_with_why():
    got = probe_modules(["json", "no_such_module_xyz"], python=sys.executable)[0]
    assert (
        list(got) == ["no_such_module_xyz"] and "ModuleNotFoundError" in got["no_such_module_xyz"]
    )
    assert probe_modules([])[0] == {} and engine_problem("simulate") == (None, {})
    broken = probe_modules(["json"], python="/bin/false")[0]
    assert broken == {"json": "the import check failed"}


RUNS = "import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n"


def test_a_module_imported_whole_is_only_found_again_until_its_file_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the probe's child finds the module there
    mod, ran = tmp_path / "sidecar_mod.py", tmp_path / "sidecar_mod.ran"
    mod.write_text(RUNS)
    missing, seen = probe_modules(["sidecar_mod"])
    assert missing == {} and ran.exists()  # first look: imported whole
    mark = seen["sidecar_mod"]
    assert mark[:2] == [sys.executable, str(mod)] and mark[3] == mod.stat().st_size
    ran.unlink()
    assert probe_modules(["sidecar_mod"], known=seen) == ({}, seen)
    assert not ran.exists()  # the same file: found again, not imported
    mod.write_text("raise ImportError('broken by an upgrade')\n")  # a reinstall rewrites it
    missing, after = probe_modules(["sidecar_mod"], known=seen)
    assert "broken by an upgrade" in missing["sidecar_mod"] and "sidecar_mod" not in after
    mod.write_text(RUNS)
    mark = probe_modules(["sidecar_mod"])[1]["sidecar_mod"]
    ran.unlink()
    # a mark of another interpreter is no reason to skip the import
    other = {"sidecar_mod": ["/other/python", *mark[1:]]}
    assert probe_modules(["sidecar_mod"], known=other)[0] == {} and ran.exists()


class Served(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != "Bearer sekrit":
            self.send_response(401)
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(json.dumps({"data": [{"id": "kimi-k2"}]}).encode())

    def log_message(self, *a):
        pass


def test_a_server_serving_another_model_is_named_with_the_fix():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Served)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_port}/v1"
    try:
        engine = {"model": "default", "api_key_env": "MY_KEY"}
        problem = model_problem(engine, [url], {"MY_KEY": "sekrit"})
        assert problem == {"model": "default", "served": {url: ["kimi-k2"]}}
        msg = model_message(problem)
        assert msg.startswith("job.engine.model 'default' is not served") and "'kimi-k2'" in msg
        assert model_problem(dict(engine, model="kimi-k2"), [url], {"MY_KEY": "sekrit"}) is None
        # without the key the server does not answer: nothing to judge (the runner will say)
        assert model_problem(engine, [url], {}) is None
    finally:
        srv.shutdown()
        srv.server_close()
    assert model_problem({"kind": "simulate"}, [url], {}) is None
