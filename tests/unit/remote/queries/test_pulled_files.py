"""What pull is told: the output files, the caps, and the ids of the records beyond the caps by the
prompt file as it is now (the runner's count), so that export leaves out what status leaves out."""

from __future__ import annotations

from remote.common.caps import Caps
from remote.common.jobspec import JobSpec, Paths
from remote.job.store.outputs import encode_record
from remote.queries.pulled_files import beyond_caps
from tests.conftest import write_prompts


def test_the_records_beyond_are_those_of_prompts_past_the_cap_in_the_file_as_it_is_now(tmp_path):
    paths = Paths(tmp_path)
    prompts = paths.root / "data" / "B1.jsonl"
    write_prompts(prompts, 6, "B1")
    paths.outputs.mkdir(parents=True)
    with open(paths.output("B1"), "wb") as f:
        for i in range(4):  # made at indexes 0..3 of the file as it was
            rec = {"id": f"B1-{i:06d}", "dataset": "B1", "index": i, "finish_reason": "stop"}
            f.write(encode_record(dict(rec, usage={"completion_tokens": 5})))
    job = JobSpec.from_dict(
        {
            "datasets": {
                "B1": {"prompts": "data/B1.jsonl", "est_tokens": 10},
                "B2": {"prompts": "data/B2.jsonl", "est_tokens": 10},  # no records, no file
            }
        }
    )
    assert beyond_caps(paths, job, Caps(max_samples=3)) == {"B1": ["B1-000003"]}
    lines = prompts.read_text().splitlines(keepends=True)
    prompts.write_text("".join(reversed(lines)))  # its first three are B1-000005, 4 and 3 now
    got = beyond_caps(paths, job, Caps(max_samples=3))
    assert got == {"B1": ["B1-000000", "B1-000001", "B1-000002"]}
    prompts.unlink()  # the file cannot be read: the records' own index says it (export's)
    assert beyond_caps(paths, job, Caps(max_samples=3)) == {}
