"""A runner killed with -9 after its last status write: the records it appended since are counted in
the look, as the next runner counts them (its target: the file's first N prompts as it is now)."""

from __future__ import annotations

from remote.common.jobspec import JobSpec, Paths
from remote.common.status import DatasetStatus, JobView
from remote.job.store.outputs import encode_record
from remote.queries.recount import recount
from tests.conftest import write_prompts


def test_the_records_written_after_the_last_status_are_counted(tmp_path):
    paths = Paths(tmp_path)
    write_prompts(paths.root / "data" / "B1.jsonl", 6, "B1")
    paths.outputs.mkdir(parents=True)
    with open(paths.output("B1"), "wb") as f:  # 5 records; the status counted 3 of them
        for i in (0, 1, 2, 3, 5):
            finish = "length" if i == 3 else "stop"
            rec = {"id": f"B1-{i:06d}", "dataset": "B1", "index": i, "finish_reason": finish}
            f.write(encode_record(dict(rec, usage={"completion_tokens": 10 + i})))
    job = JobSpec.from_dict({"datasets": {"B1": {"prompts": "data/B1.jsonl", "est_tokens": 10}}})
    stale = DatasetStatus(state="stopped", done=3, target=4, records=3, completion_tokens=33)
    st = JobView(state="stopped", datasets={"B1": stale}, completion_tokens=33)
    recount(paths, st, job)
    b1 = st.datasets["B1"]
    # the target is the first 4 prompts: B1-000005 is a record beyond it, kept, in no count
    assert (b1.done, b1.records, b1.completion_tokens, b1.finish_length) == (4, 5, 46, 1)
    assert b1.state == "complete" and st.completion_tokens == 46
    assert b1.mean_tokens == (10 + 11 + 12 + 13 + 15) / 5
    # a prompt file that cannot be read: the status's counts stand
    (paths.root / "data" / "B1.jsonl").unlink()
    st = JobView(state="stopped", datasets={"B1": stale}, completion_tokens=33)
    recount(paths, st, job)
    assert st.datasets["B1"] is stale
