"""The kept tokens of unfinished answers: appended as they stream, read back after a stop (a torn
line or a gap drops only that answer), ended when answered, compacted to one line each."""

from __future__ import annotations

import json

from remote.job.engine.kept_tokens import Keeping, Kept, KeptFile
from remote.job.engine.stream import Assembly

KEY = "B1\tB1-000001\t0"


def streaming(kept: KeptFile, key: str, ids: list, content: str = "", sig: str = "s1"):
    h = kept.start(key, sig, url="http://a")
    h.asm = Assembly()
    h.asm.prompt_token_ids = [1, 2, 3]
    h.asm.token_ids = list(ids)
    if content:
        h.asm.content.append(content)
    return h


def test_what_streamed_is_read_back_after_a_stop(tmp_path):
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    h = streaming(kept, KEY, [10, 11], content="Hel")
    kept.flush()
    h.asm.token_ids += [12]
    h.asm.content.append("lo")
    kept.flush()  # only the new token and text are appended
    kept.settle(h)
    kept.file.close()
    back = KeptFile.read(path)[KEY]
    assert (back.prompt_ids, back.ids, back.content) == ([1, 2, 3], [10, 11, 12], "Hello")
    assert back.thinking is False and back.url == "http://a" and back.sig == "s1"
    assert path.read_text().count("\n") == 2


def test_kept_tokens_answer_only_the_request_they_were_made_for(tmp_path):
    kept = KeptFile(tmp_path / "kept.jsonl")
    kept.entries[KEY] = Kept("s1", [1], [5, 6])
    assert kept.get(KEY, "s1").ids == [5, 6]
    assert kept.get(KEY, "other settings") is None
    h = kept.start(KEY, "s1")
    assert h.continuing and kept.tokens == 2


def test_a_gap_or_a_torn_line_drops_only_that_answer(tmp_path):
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    a, b = streaming(kept, KEY, [10]), streaming(kept, "B1\tB1-000002\t0", [20])
    kept.flush()
    kept.file.close()
    with open(path, "ab") as f:
        f.write(b'{"k":"B1\\tB1-000001\\t0","o":5,"s":"s1","t":[99]}\n')  # offset 5: a gap
        f.write(b'{"k":"B1\\tB1-000002\\t0","o":1,"s":"s1","t":[21]}\n{"k": "torn')
    got = KeptFile.read(path)
    assert list(got) == [b.key] and got[b.key].ids == [20, 21] and a.key not in got


def test_an_answered_request_ends_and_compacting_keeps_one_line_each(tmp_path):
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    for i in range(3):
        h = streaming(kept, f"B1\tB1-00000{i}\t0", [i])
        kept.flush()
        h.asm.token_ids.append(100 + i)
        kept.flush()
    kept.end("B1\tB1-000000\t0")
    kept.flush()  # its end line
    assert "B1\tB1-000000\t0" not in KeptFile.read(path)
    kept.compact()
    assert path.read_text().count("\n") == 2  # the two unfinished, whole
    assert KeptFile.read(path)["B1\tB1-000002\t0"].ids == [2, 102]
    kept.end("B1\tB1-000001\t0")
    kept.end("B1\tB1-000002\t0")
    kept.close()
    assert path.read_bytes() == b""  # nothing unfinished: the file is emptied


def test_a_keeping_knows_where_the_thinking_ends():
    k = Keeping(KEY, Kept("s", [1]))
    assert k.now() is None  # nothing streamed yet
    k.asm = Assembly()
    k.asm.token_ids = [5]
    k.asm.reasoning.append("hmm")
    assert k.now().thinking is True
    k.end_id = 9
    k.asm.token_ids.append(9)
    assert k.now().thinking is False  # the end marker came, no answer text yet


def test_each_append_carries_only_what_came_since_and_where_the_thinking_is_now(tmp_path):
    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    h = streaming(kept, KEY, [10])
    h.end_id = 9
    h.asm.reasoning.append("hmm")
    kept.flush()
    for ids in ([11], [9], [12], []):  # the end marker comes in the third append; the last: nothing
        h.asm.token_ids += ids
        kept.flush()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(e["o"], e["t"], e["th"]) for e in lines] == [
        (0, [10], True),
        (1, [11], True),
        (2, [9], False),
        (3, [12], False),
    ]
    kept.file.close()
    again = KeptFile(path)  # a restart: the answer is continued, its lines go on from offset 4
    h2 = again.start(KEY, "s1")
    assert h2.continuing and h2.base.ids == [10, 11, 9, 12]
    h2.asm = Assembly()
    h2.asm.token_ids = [13]
    again.flush()
    again.file.close()
    assert KeptFile.read(path)[KEY].ids == [10, 11, 9, 12, 13]


def test_at_a_start_kept_tokens_of_a_turn_the_sidecar_answers_are_dropped(tmp_path):
    """A kill between a turn's reply reaching the sidecar and its end reaching the kept file
    leaves tokens of an answered turn: they are not continued, and not counted as waiting."""
    from types import SimpleNamespace

    from remote.job.engine.kept_tokens import open_kept

    path = tmp_path / "kept.jsonl"
    kept = KeptFile(path)
    for key in ("MT\tMT-1\t0", "MT\tMT-2\t1", "MT\tMT-3\t0"):
        streaming(kept, key, [10, 11])
    kept.flush()
    kept.file.close()
    queued = []
    run = SimpleNamespace(
        done={"MT-3"},  # recorded whole: its kept tokens are old
        partials=SimpleNamespace(answered=lambda pid: {"MT-1": 1, "MT-2": 1}.get(pid, 0)),
        prompts=_Prompts(["MT-1", "MT-2", "MT-3"]),
        target_n=3,
        ledger=SimpleNamespace(
            is_new=lambda pid: True, requeue=lambda p, t, partial: queued.append(p)
        ),
    )
    logged = []
    got = open_kept(path, {"MT": run}, logged.append)
    assert list(got.entries) == ["MT\tMT-2\t1"]  # turn 1 of MT-2 is the one still unanswered
    assert queued == ["MT-2"] and logged == [
        "1 unfinished answers (2 tokens) kept: they are continued first"
    ]
    assert list(KeptFile.read(path)) == ["MT\tMT-2\t1"]


class _Prompts:
    def __init__(self, ids):
        self.ids = ids

    def __getitem__(self, i):
        return self.ids[i]
