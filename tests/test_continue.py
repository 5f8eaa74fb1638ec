"""No generated token thrown away: the tokens of unfinished answers are kept as they
stream, and after a kill -9 the answer is continued from them on /v1/completions; the record is the
one an uninterrupted answer makes. The pieces (kept file, thinking split, request rules) first, then
the runner against the test server's token model, which continues any prefix of its own answers."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess

from remote.common import procinfo
from remote.common.jobspec import Paths
from remote.job.engine import continuation
from remote.job.engine.kept_tokens import Kept, KeptFile
from remote.job.engine.stream import Assembly, ThinkingSplit
from tests.conftest import REPO, records, runner_cmd, status, wait_for
from tests.helpers.runner_jobs import make_root, run
from tests.openai_server import TokenModel

# ------------------------------------------------------------------ the pieces


def _stream(kept: KeptFile, key: str, chunks: list[list[int]], text: str = "reasoning"):
    h = kept.start(key, "sig")
    h.asm = Assembly()
    h.asm.add({"prompt_token_ids": [1, 2, 3], "choices": []})
    for ids in chunks:
        h.asm.add({"choices": [{"delta": {text: f" {ids[0]}"}, "token_ids": ids}]})
        kept.flush()
    return h


def test_kept_tokens_read_back_after_a_kill_and_end_when_answered(tmp_path):
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    _stream(kept, "B1\ta", [[10, 11], [12]])
    _stream(kept, "B1\tb", [[20]], text="content")
    _stream(kept, "B1\tc", [[30]])
    kept.end("B1\tc")
    kept.flush()  # no close: a kill -9 leaves the file as the last append left it
    again = KeptFile(path)
    a = again.get("B1\ta", "sig")
    assert a.prompt_ids == [1, 2, 3] and a.ids == [10, 11, 12] and a.reasoning == " 10 12"
    assert a.thinking is True and a.content == ""
    b = again.get("B1\tb", "sig")
    assert b.ids == [20] and b.thinking is False and b.content == " 20"
    assert again.get("B1\tc", "sig") is None  # answered: nothing kept
    assert again.get("B1\ta", "other request") is None  # kept tokens answer one request only
    assert len(path.read_text().splitlines()) == 2  # rewritten at open with what is still open


def test_a_gap_or_a_torn_line_means_asked_again_from_the_start(tmp_path):
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    _stream(kept, "B1\ta", [[10], [11], [12]])
    _stream(kept, "B1\tb", [[20], [21]])
    lines = path.read_text().splitlines(keepends=True)
    a_lines = [ln for ln in lines if '"B1\\ta"' in ln]
    torn = "".join(ln for ln in lines if ln != a_lines[1])  # a's middle line lost
    path.write_text(torn + '{"k": "B1\\tb", "o": 2, "t": [2')  # and a torn last line
    again = KeptFile(path)
    assert again.get("B1\ta", "sig") is None
    assert again.get("B1\tb", "sig").ids == [20, 21]


def test_a_continuation_appends_after_the_kept_part(tmp_path):
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    _stream(kept, "B1\ta", [[10]])
    kept = KeptFile(path)
    h = kept.start("B1\ta", "sig")
    assert h.continuing and h.base.ids == [10]
    h.asm = Assembly(ThinkingSplit("</think>", True))
    h.asm.add({"choices": [{"text": " 11</think> x", "token_ids": [11, 7, 99]}]})
    kept.settle(h)  # the continuation was cut too
    got = KeptFile(path).get("B1\ta", "sig")
    assert got.ids == [10, 11, 7, 99] and got.reasoning == " 10 11" and got.content == " x"
    assert got.thinking is False and got.parts == 1  # its next continuation is the second
    assert continuation.merged(got, None).continued == 2


def test_the_thinking_split_holds_a_marker_cut_across_chunks():
    r, c = [], []
    s = ThinkingSplit("</think>", True)
    for text in (" a b</th", "ink>", "\n\nanswer", " more"):
        s.feed(text, r, c)
    assert "".join(r) == " a b" and "".join(c) == "\n\nanswer more"
    r, c = [], []
    s = ThinkingSplit("</think>", True)
    s.feed(" a </", r, c)
    s.end(r)  # the stream ended inside the thinking: nothing held back
    assert "".join(r) == " a </" and c == []


def test_what_continuing_would_change_is_named():
    assert continuation.why_not({"temperature": 0.7, "max_tokens": 10, "seed": 1}) is None
    why = continuation.why_not({"presence_penalty": 0.5, "stop": ["\n\n"], "guided_json": {}})
    assert "presence_penalty" in why and "stop" in why and "guided_json" not in why
    assert "response_format" in continuation.why_not({"response_format": {"type": "json_object"}})
    assert continuation.why_not({"response_format": {"type": "text"}}) is None


def test_the_continuation_request_counts_what_was_made():
    kept = Kept("s", [1, 2], [5, 6, 7], "r", "", True)
    fixed = {
        "model": "m",
        "messages": [],
        "max_tokens": 10,
        "min_tokens": 4,
        "seed": 3,
        "chat_template_kwargs": {"thinking": True},
        "temperature": 0.5,
    }
    b = continuation.body(fixed, kept, "B1-0")
    assert b["prompt"] == [1, 2, 5, 6, 7] and b["max_tokens"] == 7 and b["min_tokens"] == 1
    assert b["seed"] != 3 and b["temperature"] == 0.5 and b["return_token_ids"] is True
    assert "messages" not in b and "chat_template_kwargs" not in b
    assert continuation.body(dict(fixed, max_tokens=3), kept, "B1-0") is None  # all used
    m = continuation.merged(kept, None)
    assert m.finish_reason == "length" and m.token_ids == [5, 6, 7] and m.continued == 1


# ------------------------------------------------------------------ the runner, killed


# the runner is stopped while a test reads what it kept: its requests' clock runs on meanwhile,
# and a request timed out then is continued within the same run (a continuation the kill did not
# make). Requests never time out in these tests, however long the machine takes.
LONG = {"request_timeout": 600}


def _job(tmp_path, srv, n: int, sampling: dict | None = None, extra: dict | None = None):
    root = make_root(tmp_path, {"B1": n}, {"base_url": srv.url, "concurrency": 8, **LONG})
    job = json.loads((root / "job.json").read_text())
    job["sampling"] = {"max_tokens": 400, "temperature": 0.0, **(sampling or {})}
    job["extra_body"] = {"return_token_ids": True, **(extra or {})}
    (root / "job.json").write_text(json.dumps(job))
    return root


def _kept_lines(root) -> list[dict]:
    return _tolerant(root / "run" / "kept.jsonl")


def _tolerant(p) -> list[dict]:
    out = []
    for ln in p.read_text().splitlines() if p.exists() else ():
        try:
            out.append(json.loads(ln))
        except ValueError:
            pass  # a line the kill tore
    return out


def _unanswered(root) -> dict:
    """The kept answers the next start must continue: kept, and not yet in the outputs or the
    conversations' sidecar (a kill can fall after an answer is written and before the kept file
    hears of its end)."""
    paths = Paths(root)
    done, turns = set(), set()
    for p in paths.outputs.glob("*.jsonl"):
        if p.name.endswith(".partial.jsonl"):
            turns |= {(e["id"], e["turn"]) for e in _tolerant(p)}
        elif not p.name.endswith(".errors.jsonl"):
            done |= {r["id"] for r in _tolerant(p)}
    out = {}
    for key, k in KeptFile.read(paths.kept).items():
        _, pid, *turn = key.split("\t")
        if pid not in done and not (turn and (pid, int(turn[0])) in turns):
            out[key] = k
    return out


def _all_stopped(pid: int) -> bool:
    """Every thread of `pid` in state T (stopped), as /proc says."""
    states = procinfo.thread_states(pid)
    return bool(states) and all(st in ("T", "t") for st in states)


def _kill_mid_answer(root, enough) -> dict:
    """Kill -9 the runner once `enough` holds of the kept answers still unanswered; the runner is
    stopped while they are read, so the kill finds exactly what was checked. Returns them."""
    proc = subprocess.Popen(
        runner_cmd(root), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    seen = {}

    def stopped_enough() -> bool:
        if not enough(_unanswered(root)):  # a first look with it running: most looks say no
            return False
        proc.send_signal(signal.SIGSTOP)
        # a signal lands when the kernel delivers it: read only once every thread is stopped
        wait_for(lambda: _all_stopped(proc.pid), timeout=30, interval=0.01, what="runner stopped")
        seen.update(entries=_unanswered(root))
        if enough(seen["entries"]):
            return True
        proc.send_signal(signal.SIGCONT)
        return False

    try:
        wait_for(stopped_enough, timeout=60, what="tokens kept mid-answer")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return seen["entries"]


def _right(tm: TokenModel, rec: dict) -> None:
    """The record an uninterrupted answer makes: the token model's whole answer, split right."""
    msg = rec["conversations"][-1]
    reasoning, content = tm.split(rec["token_ids"])
    assert msg.get("reasoning_content") == reasoning and msg["content"] == content, rec["id"]
    assert rec["token_ids"][-1] == TokenModel.EOS and rec["finish_reason"] == "stop"
    assert rec["usage"] == {
        "prompt_tokens": len(rec["prompt_token_ids"]),
        "completion_tokens": len(rec["token_ids"]),
    }


def test_kill_9_mid_answer_continues_it_token_for_token(tmp_path, openai_server):
    srv = openai_server(token_model=True, token_time=0.01, chunk_tokens=2, shape="vllm")
    # 0.4-1.6 s an answer, not in step: at any moment some are in their thinking, some past it
    srv.lengths = lambda key: 40 + int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 120
    root = _job(tmp_path, srv, 40)
    path = root / "run" / "kept.jsonl"
    # what the next start finds: answers cut inside their thinking and inside their text
    entries = _kill_mid_answer(root, lambda e: {k.thinking for k in e.values()} >= {True, False})
    res = run(root)
    assert res.returncode == 0, res.stderr
    tm = srv.tokens_model
    recs = {r["id"]: r for r in records(root, "B1")}
    assert len(recs) == 40
    for rec in recs.values():
        _right(tm, rec)
        full = tm.answer(
            srv.prompt_key({"messages": rec["conversations"][:-1]}),
            srv.tokens_for(srv.prompt_key({"messages": rec["conversations"][:-1]})),
            True,
        )
        assert rec["token_ids"] == full
    continued = [r for r in recs.values() if r.get("continued")]
    kept_ids = {k.split("\t")[1]: v for k, v in entries.items()}
    assert {r["id"] for r in continued} == set(kept_ids)
    # each continued answer's chat request was made once; the rest came from /v1/completions
    # with the kept ids as prompt and the allowance left
    by_prompt = {tuple(b["prompt"]): b for b in srv.completion_bodies}
    cuts = set()
    for r in continued:
        k = kept_ids[r["id"]]
        body = by_prompt[tuple(k.prompt_ids + k.ids)]
        assert body["max_tokens"] == 400 - len(k.ids) and body["temperature"] == 0.0
        assert srv.attempts[srv.prompt_key({"messages": r["conversations"][:-1]})] == 1
        cuts.add(k.thinking)
    assert cuts == {True, False}  # cut inside the thinking, and inside the answer text
    assert len(srv.completion_bodies) == len(continued)
    st = status(root)["kept"]
    assert st["on"] and st["continued"] == len(continued)
    assert st["tokens_saved"] == sum(len(k.ids) for k in entries.values())
    assert KeptFile.read(path) == {} and _kept_lines(root) == []  # all answered: none kept
    # generated again: only the in-flight answers that had no token kept yet (the last second)
    made = sum(len(r["token_ids"]) for r in recs.values())
    assert srv.generated_tokens - made < made * 0.25


def test_penalties_start_over_and_say_so_once(tmp_path, openai_server):
    srv = openai_server(token_model=True, token_time=0.01, shape="vllm")
    srv.lengths = lambda key: 80
    root = _job(tmp_path, srv, 16, sampling={"presence_penalty": 0.5})
    proc = subprocess.Popen(
        runner_cmd(root), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for(lambda: len(srv.bodies) >= 8, what="answers in flight")  # killed mid-answer
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert run(root).returncode == 0
    log = (root / "logs" / "runner.log").read_text()
    lines = [ln for ln in log.splitlines() if "presence_penalty" in ln]
    assert len(lines) == 2 and "asked again from their start" in lines[0]  # once per start
    assert srv.completion_bodies == [] and len(records(root, "B1")) == 16
    assert not _kept_lines(root) and status(root)["kept"]["on"] is False


def test_without_token_ids_a_restart_says_it_throws_work_away(tmp_path, openai_server):
    srv = openai_server(shape="vllm")
    root = make_root(tmp_path, {"B1": 4}, {"base_url": srv.url})
    assert run(root).returncode == 0
    log = (root / "logs" / "runner.log").read_text()
    assert "set job.extra_body.return_token_ids: true" in log
    assert status(root)["kept"]["why_not"].startswith("set job.extra_body.return_token_ids")
    # asked for, but the server gives none (an older vLLM, another server): said once too
    srv = openai_server(shape="classic")
    root = _job(tmp_path / "classic", srv, 6)
    assert run(root).returncode == 0
    log = (root / "logs" / "runner.log").read_text()
    assert log.count("sends no token ids: restarts redo answers in flight") == 1
    assert "sends no token ids" in status(root)["kept"]["why_not"]


def test_the_end_of_thinking_sharing_a_chunk_loses_no_character(tmp_path, openai_server):
    # vLLM's streaming reasoning parser looks for `</think>`'s text in the chunk; with
    # skip_special_tokens it is not there, and the chunk is cut one character early
    srv = openai_server(token_model=True, chunk_tokens=3, shape="vllm")
    root = _job(tmp_path, srv, 12)
    assert run(root).returncode == 0
    for rec in records(root, "B1"):
        _right(srv.tokens_model, rec)
    assert all(b["skip_special_tokens"] is False for b in srv.bodies)
    # the same with the stripped marker (the job's own skip_special_tokens): the character goes
    root = _job(tmp_path / "skip", srv, 12, extra={"skip_special_tokens": True})
    assert run(root).returncode == 0
    wrong = []
    for rec in records(root, "B1"):
        right, _ = srv.tokens_model.split(rec["token_ids"])
        wrong.append(rec["conversations"][-1]["reasoning_content"] != right)
    assert any(wrong)


def test_status_shows_what_is_kept_and_what_continuing_saved():
    from deploytool.views.progress import kept_line
    from remote.common.status import JobStatus, KeptStatus

    st = JobStatus(state="running")
    st.kept = KeptStatus(True, None, 120_000, 3, 256, 480_000, 1, 9_000, 2100.0)
    line = kept_line(st)
    assert "streaming 2.1k tok/s" in line and "unfinished answers: 120.0k tokens kept" in line
    assert "(3 waiting to be continued)" in line and "continued 256 after a restart" in line
    assert "saving 480.0k tokens" in line and "1 asked again" in line
    st.kept = KeptStatus(False, "set job.extra_body.return_token_ids: true (vLLM) to keep them")
    assert kept_line(st) == (
        "restarts redo answers in flight: set job.extra_body.return_token_ids: true (vLLM) to keep them"
    )
    st.state = "finished"
    assert kept_line(st) is None


def test_the_kept_file_is_rewritten_before_it_grows_with_every_token(tmp_path, monkeypatch):
    from remote.job.engine import kept_tokens as kept_mod

    monkeypatch.setattr(kept_mod, "COMPACT_AFTER", 200)
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    for i in range(20):  # answers come and go; two stay unfinished
        _stream(kept, f"B1\tdone{i}", [[i, i + 1], [i + 2]])
        kept.end(f"B1\tdone{i}")
    _stream(kept, "B1\ta", [[10, 11], [12]])
    h = _stream(kept, "B1\tb", [[20]])
    h.asm.add({"choices": [{"delta": {"reasoning": " 21"}, "token_ids": [21]}]})
    kept.flush()
    assert len(path.read_bytes()) < 600  # not twenty finished answers' lines
    again = KeptFile(path)
    assert set(again.entries) == {"B1\ta", "B1\tb"}
    assert again.get("B1\tb", "sig").ids == [20, 21]  # a live answer continues its lines


def test_an_answer_whose_stream_broke_after_its_last_token_is_not_continued():
    kept = Kept("s", [1], [5, 6, 2], "r", "c", False, finish="stop")
    assert continuation.body({"max_tokens": 10}, kept, "k") is None
    m = continuation.merged(kept, None)
    assert m.finish_reason == "stop" and m.token_ids == [5, 6, 2] and m.content == "c"


def test_a_conversation_continues_its_unfinished_turn(tmp_path, openai_server):
    from tests.helpers.conversations import conversation_root

    srv = openai_server(token_model=True, token_time=0.01, chunk_tokens=2, shape="vllm")
    srv.lengths = lambda key: 40 + int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 60
    root = conversation_root(tmp_path, 12, {"base_url": srv.url, "concurrency": 6, **LONG})
    # a later turn cut mid-answer: its key names the turn
    kept = _kill_mid_answer(root, lambda e: any(not k.endswith("\t0") for k in e))
    assert run(root).returncode == 0
    tm = srv.tokens_model
    made = {
        tuple(tm.answer(srv.prompt_key(b), srv.tokens_for(srv.prompt_key(b)), True))
        for b in srv.bodies
    }
    recs = records(root, "MT")
    assert len(recs) == 12
    for rec in recs:
        assert rec["turns_done"] == 3
        replies = [m for m in rec["conversations"] if m["role"] == "assistant"]
        for turn, msg in zip(rec["turns"], replies):
            assert tuple(turn["token_ids"]) in made  # the whole answer to that turn's request
            assert (msg.get("reasoning_content"), msg["content"]) == tm.split(turn["token_ids"])
    continued = {(r["id"], k) for r in recs for k, t in enumerate(r["turns"]) if t.get("continued")}
    assert continued == {(k.split("\t")[1], int(k.split("\t")[2])) for k in kept}
    assert any(k > 0 for _, k in continued)


def test_an_append_the_disk_refused_is_made_whole_by_the_next(tmp_path, monkeypatch):
    from remote.job.store.outputs import DiskFull

    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    h = _stream(kept, "B1\ta", [[10]])
    real = kept.file.append

    def full(data):
        raise DiskFull("kept.jsonl: No space left on device")

    monkeypatch.setattr(kept.file, "append", full)
    h.asm.add({"choices": [{"delta": {"reasoning": " 11"}, "token_ids": [11]}]})
    kept.flush()  # refused: nothing written, nothing counted as written
    monkeypatch.setattr(kept.file, "append", real)
    h.asm.add({"choices": [{"delta": {"reasoning": " 12"}, "token_ids": [12]}]})
    kept.flush()
    assert KeptFile.read(path)["B1\ta"].ids == [10, 11, 12]


def test_a_kept_answer_goes_back_to_the_server_that_made_it(tmp_path, openai_server):
    # each test server knows only the prompts it was asked: a continuation sent to the other one
    # would be refused (and the answer asked again from its start)
    servers = [openai_server(token_model=True, token_time=0.01, shape="vllm") for _ in range(2)]
    for srv in servers:
        srv.lengths = lambda key: 40 + int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 80
    root = make_root(
        tmp_path, {"B1": 30}, {"base_urls": [s.url for s in servers], "concurrency": 4, **LONG}
    )
    job = json.loads((root / "job.json").read_text())
    job["sampling"] = {"max_tokens": 400, "temperature": 0.0}
    job["extra_body"] = {"return_token_ids": True}
    (root / "job.json").write_text(json.dumps(job))
    kept = _kill_mid_answer(root, lambda e: {k.url for k in e.values()} >= {s.url for s in servers})
    assert run(root).returncode == 0
    st = status(root)["kept"]
    assert st["continued"] == len(kept) and st["started_over"] == 0
    for srv in servers:
        mine = [k for k in kept.values() if k.url == srv.url]
        assert len(srv.completion_bodies) == len(mine) > 0
    assert len(records(root, "B1")) == 30


def test_while_the_first_answers_stream_the_eta_is_reckoned_at_what_streams(
    tmp_path, openai_server
):
    """A start (or a restart onto a slower engine) has no finished answer to measure for an
    answer's length: its ETA was none, or the job's mean from another engine, starred. The runner
    measures its tokens as they stream: the ETA is given at once and is not a guess, and what the
    answers in flight have made is taken off what is left."""
    srv = openai_server(token_model=True, token_time=0.02, shape="vllm")
    srv.lengths = lambda key: 390  # about 8 s an answer, all three at once
    root = _job(tmp_path, srv, 3)
    job = json.loads((root / "job.json").read_text())
    job["datasets"]["B1"]["est_tokens"] = 400
    (root / "job.json").write_text(json.dumps(job))
    proc = subprocess.Popen(
        runner_cmd(root), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        seen = {}

        def streaming() -> bool:
            if not (root / "run" / "status.json").exists():
                return False
            st = status(root)
            b1 = (st.get("datasets") or {}).get("B1") or {}
            if st.get("in_flight") == 3 and b1.get("remaining_tokens", 1200) < 1200:
                seen.update(st)
                return True
            return False

        wait_for(streaming, timeout=60, interval=0.05, what="answers streaming, status written")
        assert seen["eta_s"] is not None and seen["eta_guess"] is False
        assert seen["datasets"]["B1"]["eta_s"] == seen["eta_s"]
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(records(root, "B1")) == 3
