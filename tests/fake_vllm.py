"""A stand-in `vllm` executable for the tests: `vllm serve MODEL --port P [options]`.

Like vLLM it loads for a while before it answers, spawns worker processes in process groups of their
own (which outlive a killed parent), and serves the OpenAI API and Prometheus /metrics.
Test-only options: --fake-delay S, --fake-load-until FILE (loading lasts until it exists), --fake-die,
--fake-degenerate, --fake-workers N, --fake-engine N, --fake-answer-delay S, --fake-thinking (a reply
that is all thinking: `content` null, the text in `reasoning`),
--fake-helper S (a start-up child that lives S seconds, as vLLM's model inspection does),
--fake-exit-once FILE (the first run exits 0 after --fake-exit-after S of serving, or once the file
--fake-exit-when names exists, as vLLM's API
server does when its engine dies; later runs serve), --fake-die-later FILE (the first run serves,
every later one dies while loading with a CUDA error), --fake-dp-peer FILE (a data-parallel
pair: the headless rank writes its engine pids there, and the head, like vLLM's, hangs every
other request without an answer while one of them is dead).
`--host` and `--api-key` (or VLLM_API_KEY) as vLLM reads them: every /v1 request then needs
`Authorization: Bearer KEY` (401 without). The stand-in never leaves loopback: asked for another
address (or none, where vLLM would take every interface) it says so and listens on 127.0.0.1.
`--headless` serves no HTTP, as vLLM's data-parallel workers do. `--served-model-name` changes the id
requests must use, and another name is vLLM's 404. `--fake-engine` children stay in the server's
session and group without its environment (real vLLM's EngineCore renames itself, clobbering
/proc/PID/environ) and outlive a kill -9 of the server. While one of them is stopped (SIGSTOP) the
server is wedged as a real one is: /v1/models answers, the token counters freeze, requests hang.
With `return_token_ids` a chat answer carries prompt and reply ids; `--speculative-config` and
`--kv-transfer-config` as vLLM's extraction reads them: /v1/completions then writes each prompt's
hidden states ([tokens, layers, 8] BF16 zeros, written by hand) into shared_storage_path and names
the file in its answer, as vLLM's connector does.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("model")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fake-delay", type=float, default=0.5)
    p.add_argument("--fake-load-until", help="loading lasts until this file exists")
    p.add_argument(
        "--fake-plain-load-until", help="started without a draft, loading lasts until this exists"
    )
    p.add_argument("--fake-die", action="store_true")
    p.add_argument("--fake-degenerate", action="store_true")
    p.add_argument("--fake-workers", type=int, default=2)
    p.add_argument("--fake-engine", type=int, default=0)
    p.add_argument("--served-model-name")
    p.add_argument("--fake-dp-peer")
    p.add_argument("--fake-answer-delay", type=float, default=0.0)
    p.add_argument("--fake-answer-hold", help="no answer is sent while this file exists")
    p.add_argument("--fake-hold-while", help="with --fake-hold-prompt: held while this file exists")
    p.add_argument(
        "--fake-hold-prompt",
        help="a chat request whose messages hold this text is held: its stream says it lives "
        "(an SSE comment every 0.3 s) and answers nothing; released, its connection is dropped",
    )
    p.add_argument("--fake-thinking", action="store_true", help="all thinking: content null")
    p.add_argument("--fake-exit-once")
    p.add_argument("--fake-exit-when", help="with --fake-exit-once: exit once this file exists")
    p.add_argument("--fake-exit-after", type=float, default=1.0)
    p.add_argument("--fake-die-later")
    p.add_argument("--fake-helper", type=float, default=0.0, help="a start-up child living S s")
    p.add_argument(
        "--headless", action="store_true", help="a data-parallel worker: no API server, like vLLM's"
    )
    p.add_argument("--host")
    p.add_argument("--api-key")
    p.add_argument("--speculative-config", type=json.loads)
    p.add_argument("--kv-transfer-config", type=json.loads)
    p.add_argument(
        "--fake-accept",
        action="append",
        default=[],
        help="TEXT=J: with a draft, an answer to a prompt holding TEXT has J draft tokens accepted "
        "each step (none matched: 0)",
    )
    a, rest = p.parse_known_args()
    spec = a.speculative_config or {}
    drafting = bool(spec) and spec.get("method") != "extract_hidden_states"
    k = int(spec.get("num_speculative_tokens") or 0)
    accepts = [(t, int(j)) for t, _, j in (x.rpartition("=") for x in a.fake_accept)]
    if drafting and "mismatched" in str(spec.get("model")):  # as vLLM refuses such a draft
        print(
            "(EngineCore_DP0 pid=1) ERROR 12-05 06:00:00 [core.py:708] ValueError: the draft's "
            "vocab size 1000 does not match the target's 163840",
            flush=True,
        )
        sys.exit(1)
    folder = str(spec.get("model") or "")
    if drafting and folder.startswith("/") and not os.path.isfile(f"{folder}/config.json"):
        print(  # as vLLM's loading of a draft folder it cannot read
            f"(EngineCore_DP0 pid=1) ERROR 12-05 06:00:00 [core.py:708] OSError: {folder} does "
            "not appear to have a file named config.json",
            flush=True,
        )
        sys.exit(1)
    counted = {"drafts": 0, "tokens": 0, "accepted": 0, "per_pos": [0] * k}
    print(f"fake vllm {a.cmd} {a.model} port {a.port} extra {rest}", flush=True)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "time.sleep(3600)",
            ],
            start_new_session=True,
        )
        for _ in range(a.fake_workers)
    ]
    workers += [
        subprocess.Popen(
            # argv[0] is the title first, as setproctitle leaves it
            ["FAKE::EngineCore", "-c", "import time\ntime.sleep(3600)"],
            executable=sys.executable,
            env={},
        )
        for _ in range(a.fake_engine)
    ]
    if a.fake_helper:  # vLLM inspects the model in a child process that ends before it is ready
        subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({a.fake_helper})"])
    print("workers " + " ".join(str(w.pid) for w in workers), flush=True)
    served = a.served_model_name or a.model
    key = a.api_key or os.environ.get("VLLM_API_KEY")
    for i in range(3):
        print(f"Loading safetensors checkpoint shards: {i + 1}/3", flush=True)
        time.sleep(a.fake_delay / 3)
    while a.fake_load_until and not os.path.exists(a.fake_load_until):
        time.sleep(0.05)
    while a.fake_plain_load_until and not drafting and not os.path.exists(a.fake_plain_load_until):
        time.sleep(0.05)
    if a.fake_die_later:
        if os.path.exists(a.fake_die_later):
            print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
            sys.exit(1)
        open(a.fake_die_later, "w").close()
    if a.fake_die:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        sys.exit(1)
    t0 = time.time()
    if a.headless:
        print("INFO: headless mode: engine cores only, no API server", flush=True)
        if a.fake_dp_peer:
            pids = [w.pid for w in workers[a.fake_workers :]]
            with open(a.fake_dp_peer, "w") as f:
                json.dump(pids, f)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()
        return

    lock, served_n = threading.Lock(), [0]
    engines = workers[a.fake_workers :]
    frozen = [None]  # when an engine process was first seen stopped

    def clock():
        """Time as the token counters see it: it stands still while an engine is stopped."""
        stopped = False
        for w in engines:
            try:
                with open(f"/proc/{w.pid}/stat") as f:
                    stopped |= f.read().rsplit(")", 1)[1].split()[0] in "tT"
            except OSError:
                pass
        if stopped and frozen[0] is None:
            frozen[0] = time.time()
        elif not stopped:
            frozen[0] = None
        return frozen[0] or time.time()

    def peer_dead():
        try:
            with open(a.fake_dp_peer) as f:
                pids = json.load(f)
        except (TypeError, OSError, ValueError):
            return False
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                        return True
            except OSError:
                return True
        return False

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, body, ctype="application/json"):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _hold(self):
            """Held by the test: a live stream with no token in it (never stuck, never answered),
            so the job outlasts the test's steps by construction."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                while os.path.exists(a.fake_hold_while):
                    self.wfile.write(b": held\n\n")
                    self.wfile.flush()
                    time.sleep(0.3)
            except OSError:
                pass  # the runner let it go
            self.close_connection = True

        def _refused(self) -> bool:
            if (
                key
                and self.path.startswith("/v1")
                and (self.headers.get("Authorization") != f"Bearer {key}")
            ):
                self._send(401, {"error": "Unauthorized"})
                return True
            return False

        def do_GET(self):
            if self._refused():
                return
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": served, "root": a.model}]})
            elif self.path == "/metrics":
                gen = int((clock() - t0) * 1000)
                self._send(
                    200,
                    "# HELP vllm:num_requests_running x\n"
                    f'vllm:num_requests_running{{model_name="{a.model}"}} 3.0\n'
                    f'vllm:num_requests_waiting{{model_name="{a.model}"}} 1.0\n'
                    f'vllm:kv_cache_usage_perc{{model_name="{a.model}"}} 0.42\n'
                    f'vllm:generation_tokens_total{{model_name="{a.model}"}} {gen}.0\n'
                    f'vllm:prompt_tokens_total{{model_name="{a.model}"}} {gen // 2}.0\n'
                    + (spec_lines() if drafting else ""),
                    "text/plain",
                )
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(n))
            if self._refused():
                return
            if body.get("model") != served:
                msg = f"The model `{body.get('model')}` does not exist. Valid aliases: {served}."
                err = {"message": msg, "type": "NotFoundError", "param": "model", "code": 404}
                return self._send(404, {"error": err})
            if self.path == "/v1/completions":
                return self._send(200, completion(body))
            with lock:
                served_n[0] += 1
                mine = served_n[0]
            if mine % 2 == 0 and peer_dead():  # the first (the smoke test) is never lost
                time.sleep(3600)  # routed to the dead rank: no answer, no error, connection open
                return
            held = a.fake_hold_prompt and a.fake_hold_prompt in json.dumps(body.get("messages"))
            if held and os.path.exists(a.fake_hold_while):
                return self._hold()
            time.sleep(a.fake_answer_delay)
            while a.fake_answer_hold and os.path.exists(a.fake_answer_hold):
                time.sleep(0.05)
            while clock() and frozen[0] is not None:
                time.sleep(0.1)  # wedged: the engine is stopped, nothing comes back
            if drafting:  # each step: its own token and the j of the draft's k accepted
                messages = json.dumps(body.get("messages"))
                j = next((j for t, j in accepts if t in messages), 0)
                with lock:
                    steps = -(-20 // (1 + j))
                    counted["drafts"] += steps
                    counted["tokens"] += steps * k
                    counted["accepted"] += steps * j
                    for i in range(j):
                        counted["per_pos"][i] += steps
            text = "the " * 40 if a.fake_degenerate else "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"
            ids = {}
            if body.get("return_token_ids"):  # as vLLM: the ids only when asked
                seed = sum(map(ord, json.dumps(body.get("messages")))) % 1000
                ids = {"prompt_token_ids": [seed + i for i in range(12)]}
            self._send(
                200,
                {
                    **ids,
                    "model": served,
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            **({"token_ids": list(range(20))} if ids else {}),
                            "message": (
                                {"role": "assistant", "content": None, "reasoning": text}
                                if a.fake_thinking
                                else {"role": "assistant", "content": text}
                            ),
                        }
                    ],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 20},
                },
            )

    def spec_lines() -> str:
        """vLLM's speculative-decoding counters, as its Prometheus logger names them."""
        m, pre = f'model_name="{a.model}",engine="0"', "vllm:spec_decode_num_"
        out = f"{pre}drafts_total{{{m}}} {counted['drafts']}.0\n"
        out += f"{pre}draft_tokens_total{{{m}}} {counted['tokens']}.0\n"
        out += f"{pre}accepted_tokens_total{{{m}}} {counted['accepted']}.0\n"
        for i, v in enumerate(counted["per_pos"]):
            out += f'{pre}accepted_tokens_per_pos_total{{{m},position="{i}"}} {v}.0\n'
        return out

    def completion(body: dict) -> dict:
        """A prefill of token ids; with the extraction config, the hidden-states file vLLM's
        connector writes ([tokens, layers, 8] BF16 zeros and the ids), named in the answer."""
        out = {"model": served, "choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}
        kv = a.kv_transfer_config
        if not kv:
            return out
        with lock:
            served_n[0] += 1
            mine = served_n[0]
        folder = kv["kv_connector_extra_config"]["shared_storage_path"]
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"req-{os.getpid()}-{mine}.safetensors")
        hidden_safetensors(path, body["prompt"], len(layer_ids(a.speculative_config)))
        return dict(out, kv_transfer_params={"hidden_states_path": path})

    print(f"asked to listen on {a.host or 'every interface'}; the stand-in keeps to 127.0.0.1")
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    print("INFO: Application startup complete.", flush=True)
    if a.fake_exit_once and not os.path.exists(a.fake_exit_once):
        open(a.fake_exit_once, "w").close()

        def leave():
            if a.fake_exit_when:  # exits when the test says so, however slow the machine
                while not os.path.exists(a.fake_exit_when):
                    time.sleep(0.05)
            else:
                time.sleep(a.fake_exit_after)
            print("ERROR: EngineCore died unexpectedly; shutting down (exit 0)", flush=True)
            os._exit(0)

        threading.Thread(target=leave, daemon=True).start()
    srv.serve_forever()
    print("shutting down (workers are left behind, as vLLM's sometimes are)", flush=True)


def layer_ids(speculative: dict | None) -> list:
    hf = ((speculative or {}).get("draft_model_config") or {}).get("hf_config") or {}
    return hf.get("eagle_aux_hidden_state_layer_ids") or [0]


def hidden_safetensors(path: str, ids: list, layers: int, hidden: int = 8) -> None:
    """A safetensors file written by hand (the stand-in imports nothing of the product's)."""
    hs = len(ids) * layers * hidden * 2
    meta = {
        "hidden_states": {
            "dtype": "BF16",
            "shape": [len(ids), layers, hidden],
            "data_offsets": [0, hs],
        },
        "token_ids": {"dtype": "I64", "shape": [len(ids)], "data_offsets": [hs, hs + 8 * len(ids)]},
    }
    head = json.dumps(meta).encode()
    head += b" " * (-len(head) % 8)
    data = bytes(hs) + b"".join(int(t).to_bytes(8, "little", signed=True) for t in ids)
    with open(path + ".tmp", "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head + data)
    os.rename(path + ".tmp", path)


if __name__ == "__main__":
    main()
