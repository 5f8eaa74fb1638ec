"""The record writer alone: one line per answer, and a full disk holding lines in order (their
prompts `held` in the ledger: answered, not yet recorded) until it has space."""

from __future__ import annotations

import json

from remote.job.store.ledger import PromptState
from remote.job.store.writer import RecordWriter
from tests.unit.fakes import completion, dataset


def writer():
    lines, notified = [], []
    return RecordWriter(lines.append, notified.append), lines, notified


def answer(w, run, i, tokens=10):
    p = run.prompts[i]
    run.ledger.send(p.id)
    w.write_record(run, p, completion(tokens))
    return p.id


def test_an_answer_is_one_record_and_its_prompt_done():
    w, _, _ = writer()
    run = dataset("B1", 3)
    pid = answer(w, run, 0, tokens=7)
    ((line, key, tokens, finish),) = run.out.lines
    rec = json.loads(line)
    assert (rec["id"], rec["dataset"], rec["usage"]["completion_tokens"]) == (pid, "B1", 7)
    assert (key, tokens, finish) == (pid, 7, rec["finish_reason"])  # the index keeps the finish
    assert run.ledger.state(pid) == PromptState.DONE
    assert run.done_in_target == 1 and run.completion_tokens == 7


def test_a_full_disk_holds_answers_in_order_and_writes_them_once_there_is_space():
    w, log, notified = writer()
    run = dataset("B1", 4)
    run.out.full = run.err.full = True
    held = [answer(w, run, i) for i in range(3)]
    w.write_error(run, run.prompts[3], "too long", 1)
    assert w.disk_full and len(notified) == 1 and len(w.unwritten) == 4
    assert [run.ledger.state(p) for p in held] == [PromptState.HELD] * 3 and run.out.lines == []
    w.flush()  # still full: nothing written, nothing lost
    assert len(w.unwritten) == 4
    run.out.full = run.err.full = False
    w.flush()
    assert [k for _, k, *_ in run.out.lines] == held and len(run.err.lines) == 1
    assert not w.disk_full and w.unwritten == [] and run.errors == 1
    assert all(run.ledger.state(p) == PromptState.DONE for p in held)
    assert any("disk has space again" in line for line in log)


def test_a_later_line_waits_behind_an_earlier_held_one():
    w, _, _ = writer()
    run = dataset("B1", 2)
    run.out.full = True
    first = answer(w, run, 0)
    run.out.full = False  # space again, but the first line is still waiting
    second = answer(w, run, 1)
    assert run.out.lines == [] and len(w.unwritten) == 2
    w.flush()
    assert [k for _, k, *_ in run.out.lines] == [first, second]


def test_a_record_beyond_the_cap_moves_neither_the_rows_tokens_nor_its_rate():
    """A cap lowered live under answers in flight: their records land beyond it. The row counted
    none of their tokens and yet its rate counted them all (`tokens 0`, `tok/s 285`)."""
    import time

    from remote.job.observe.status_builder import _row

    w, _, _ = writer()
    run = dataset("B1", 4)
    started = time.time()
    for i in (1, 2, 3):
        run.ledger.send(run.prompts[i].id)
    run.set_target(1, None)
    for i in (1, 2, 3):
        w.write_record(run, run.prompts[i], completion(95))
    row, _, _ = _row(run, time.time(), started, [])
    assert (row.completion_tokens, row.tokens_per_s, row.records) == (0, 0, 3)
    assert row.mean_tokens_per_s is None and w.active.tokens == 0
    answer(w, run, 0, tokens=95)  # the one in the target: counted in both
    row, _, _ = _row(run, time.time(), started, [])
    assert row.completion_tokens == 95 and row.tokens_per_s > 0 and w.active.tokens == 95
