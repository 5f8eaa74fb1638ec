"""The draft stage's pieces: a draft's folder named for what it is, a dataset's counts as the growth
of the servers' counters (the first sample where it starts, a server started again counted whole)."""

from __future__ import annotations

from remote.common.metrics import spec_decode
from remote.common.status import DraftCounts
from remote.job.loop.draft_stage import Measured, draft_tag

DRAFT = {"model": "org/kimi-eagle3", "method": "eagle3", "num_speculative_tokens": 3}


def test_a_drafts_folder_is_named_for_it_and_changes_with_what_it_is(tmp_path):
    tag = draft_tag(DRAFT)
    assert tag.startswith("kimi-eagle3-") and tag == draft_tag(dict(DRAFT))
    assert draft_tag(dict(DRAFT, num_speculative_tokens=4)) != tag
    folder = tmp_path / "my-draft"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"1")
    before = draft_tag(dict(DRAFT, model=str(folder)))
    (folder / "model.safetensors").write_bytes(b"12")  # retrained in place
    assert draft_tag(dict(DRAFT, model=str(folder))) != before and before.startswith("my-draft-")


def counts(drafts, accepted, per) -> DraftCounts:
    return DraftCounts(drafts, drafts * 3, accepted, per)


def test_the_counts_are_the_growth_after_the_first_sample_each_server_life_added(tmp_path):
    m = Measured("B1", [], 5, set(), None, tmp_path / "B1.counts.json")
    m.sampled("u", counts(20, 0, [0, 0, 0]))  # the smoke test's, before the dataset: not its
    assert m.counts.drafts == 0
    m.sampled("u", counts(30, 30, [10, 10, 10]))
    m.sampled("u", counts(8, 16, [8, 8, 0]))  # lower: the server started again from zero
    assert (m.counts.drafts, m.counts.accepted, m.counts.per_position) == (18, 46, [18, 18, 10])
    assert m.counts.mean_acceptance_length == 1 + 46 / 18
    m.keep()
    assert m.counts_path.exists()


def test_vllms_counters_are_read_with_their_positions_summed_over_engines():
    text = "\n".join(
        [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 60.0',
            'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 40.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 50.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 100.0',
            'vllm:generation_tokens_total{engine="0",model_name="m"} 9.0',
        ]
    )
    got = spec_decode(text)
    assert (got.drafts, got.draft_tokens, got.accepted) == (100, 300, 150)
    assert got.per_position == [100, 50] and got.acceptance_rates == [1.0, 0.5]
    assert spec_decode('vllm:generation_tokens_total{engine="0"} 9.0') is None  # no draft
