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


def test_a_record_beyond_the_cap_is_out_of_the_rows_tokens_and_in_its_speed():
    """A cap lowered live under answers in flight: their records land beyond it, out of the row's
    tokens and done. Their time was spent making them, so the rate (the dataset's speed) counts
    their tokens too: it counted their time and not their tokens, and a complete dataset's rate
    sank while they ended (B1 3.3k*, then 413*, with nothing of its own target made)."""
    import time

    from remote.job.observe.status_builder import _row

    w, _, _ = writer()
    run = dataset("B1", 4)
    started = time.time()
    for i in (1, 2, 3):
        run.ledger.send(run.prompts[i].id)
        run.active.sent(started)
    run.set_target(1, None)
    for i in (1, 2, 3):
        w.write_record(run, run.prompts[i], completion(95))
        run.active.ended(started + 2.0)
    row, _, _ = _row(run, started + 2.0, started, [])
    assert (row.completion_tokens, row.done, row.records) == (0, 0, 3)
    assert row.mean_tokens_per_s == round(3 * 95 / 2.0, 1) and w.active.tokens == 3 * 95
    answer(w, run, 0, tokens=95)  # the one in the target: counted in both
    row, _, _ = _row(run, time.time(), started, [])
    assert row.completion_tokens == 95 and w.active.tokens == 4 * 95


def test_disk_hours_left_are_the_jobs_mean_in_bytes_not_the_last_minutes_bursts(
    tmp_path, monkeypatch
):
    """Answers end in bursts: the hours of output the disk holds, read from the last minute's
    bytes, jumped from one look to the next (`~3 h`, then `~9 h`) with the job's speed unchanged.
    They are the bytes a token takes at the job's mean speed."""
    import time

    from remote.job.store import writer as writer_mod
    from remote.job.store.rates import ActiveTime

    disk = {"free_bytes": 50 * 2**30, "total_bytes": 100 * 2**30}
    monkeypatch.setattr(writer_mod, "disk_usage", lambda where: disk)
    w, _, _ = writer()
    run = dataset("B1", 8)
    w.active = ActiveTime(seconds=100.0, tokens=10_000)  # 100 tok/s over the job's life
    for i in range(4):
        answer(w, run, i, tokens=50)  # a burst: 4 records now
    size, tokens = w.written
    assert tokens == 200 and size > 0
    now = time.time()
    looks = [w.disk(tmp_path, t, now - 3600) for t in (now, now + 30, now + 59)]
    expected = round(50 * 2**30 / (size / tokens * w.active.per_s(now)) / 3600, 1)
    assert [d.hours_left for d in looks] == [expected] * 3
    # what streams, where it does: 256 long answers in flight, few finished, a young mean far
    # below the engine's speed (`~323,220 h at this rate`)
    fast = w.disk(tmp_path, now, now - 3600, pace=1500.0)
    assert fast.hours_left == round(50 * 2**30 / (size / tokens * 1500.0) / 3600, 1)
