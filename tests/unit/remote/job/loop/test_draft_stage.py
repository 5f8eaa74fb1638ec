"""The draft stage's pieces: a draft's folder named for what it is, a dataset's counts as the growth
of the servers' counters (the first sample where it starts, a server started again counted whole)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from remote.common.caps import Caps
from remote.common.jobspec import DatasetSpec, JobSpec, Paths
from remote.common.metrics import spec_decode
from remote.common.status import DraftKept
from remote.job.loop.draft_stage import DraftStage, Measured, draft_tag

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


class Metrics:
    """An engine whose one server's counters the test sets."""

    def __init__(self):
        self.drafts = self.accepted = 0

    async def metrics(self, url: str) -> str:
        m = 'model_name="m",engine="0"'
        return (
            f"vllm:spec_decode_num_drafts_total{{{m}}} {self.drafts}.0\n"
            f"vllm:spec_decode_num_draft_tokens_total{{{m}}} {3 * self.drafts}.0\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{{m}}} {self.accepted}.0\n"
        )


def stage(tmp_path) -> DraftStage:
    runner = SimpleNamespace(
        paths=Paths(tmp_path),
        job=JobSpec((DatasetSpec("A", "a.jsonl"), DatasetSpec("B", "b.jsonl"))),
        log=lambda line: None,
        stop=None,
    )
    st = DraftStage(runner, Caps(), False)
    st.where, st.urls = tmp_path, ["u"]
    st.cursor = (
        json.loads((tmp_path / "cursor.json").read_text())
        if (tmp_path / "cursor.json").exists()
        else {}
    )
    return st


def measured(tmp_path, name: str) -> Measured:
    """A dataset as a runner opens it: what its counts file kept."""
    path = tmp_path / f"{name}.counts.json"
    return Measured(name, [], 5, set(), None, path, DraftKept.read(path) or DraftKept())


def test_each_dataset_counts_only_what_the_server_counted_while_it_ran(tmp_path):
    eng, st = Metrics(), stage(tmp_path)
    eng.drafts = 20  # a smoke test's, before any dataset: nobody's
    a = measured(tmp_path, "A")
    asyncio.run(st._sample(eng, a))
    eng.drafts, eng.accepted = 45, 75  # A's requests
    asyncio.run(st._sample(eng, a))
    assert (a.kept.counts.drafts, a.kept.counts.accepted) == (
        25,
        75,
    ) and a.kept.counts.mean_acceptance_length == 4
    b = measured(tmp_path, "B")
    asyncio.run(st._sample(eng, b))  # where B starts: A's counts are not B's
    eng.drafts, eng.accepted = 95, 125
    asyncio.run(st._sample(eng, b))
    assert (b.kept.counts.drafts, b.kept.counts.accepted) == (50, 50)
    # a new runner (after a kill -9 in B): B's first sample adds what the server counted meanwhile
    eng.drafts, eng.accepted = 105, 135
    again = stage(tmp_path)
    asyncio.run(again._sample(eng, b))
    assert (b.kept.counts.drafts, b.kept.counts.accepted) == (60, 60)
    # then A asked again (a prompt it failed): B's counts are not A's
    asyncio.run(again._sample(eng, a))
    assert (a.kept.counts.drafts, a.kept.counts.accepted) == (25, 75)
    # the server started again from zero under A: its new life is A's, whole
    eng.drafts, eng.accepted = 4, 12
    asyncio.run(again._sample(eng, a))
    assert (a.kept.counts.drafts, a.kept.counts.accepted) == (29, 87)


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


def test_a_runner_killed_after_a_datasets_last_answer_loses_none_of_its_counts(tmp_path):
    eng, st = Metrics(), stage(tmp_path)
    asyncio.run(st._sample(eng, measured(tmp_path, "A")))  # where A starts
    eng.drafts, eng.accepted = 30, 90  # A's every answer, then a kill -9 before its next sample
    again = stage(tmp_path)
    a = measured(tmp_path, "A")  # answered whole: nothing left to ask
    again.sets = {"A": a, "B": measured(tmp_path, "B")}
    asyncio.run(again._measure(eng))
    assert (a.kept.counts.drafts, a.kept.counts.accepted) == (30, 90)
    assert json.loads((tmp_path / "A.counts.json").read_text())["counts"]["drafts"] == 30


def test_a_kill_between_two_writes_never_counts_a_samples_growth_twice(tmp_path):
    eng, st = Metrics(), stage(tmp_path)
    asyncio.run(st._sample(eng, measured(tmp_path, "A")))  # where A starts
    cursor = (tmp_path / "cursor.json").read_bytes()
    a = measured(tmp_path, "A")
    eng.drafts, eng.accepted = 10, 30
    asyncio.run(st._sample(eng, a))
    # a kill -9 after the counts were kept leaves every other file as it was before the sample
    (tmp_path / "cursor.json").write_bytes(cursor)
    eng.drafts, eng.accepted = 15, 45
    again, a = stage(tmp_path), measured(tmp_path, "A")
    asyncio.run(again._sample(eng, a))
    assert (a.kept.counts.drafts, a.kept.counts.accepted) == (15, 45)


def test_a_sample_cut_off_between_two_servers_counts_neither_twice(tmp_path):
    class Two(Metrics):
        """Two servers; the second's answer never comes (the sampler cancelled meanwhile)."""

        async def metrics(self, url: str) -> str:
            if url == "u2" and self.hang:
                self.waited_on.set()
                await asyncio.Event().wait()
            return await super().metrics(url)

    eng, st = Two(), stage(tmp_path)
    st.urls, eng.hang = ["u1", "u2"], False
    a = measured(tmp_path, "A")
    asyncio.run(st._sample(eng, a))  # where A starts, on both
    eng.drafts, eng.accepted, eng.hang = 10, 30, True

    async def cut_off():
        eng.waited_on = asyncio.Event()
        sampling = asyncio.ensure_future(st._sample(eng, a))
        await eng.waited_on.wait()  # u1 counted, u2 waited on
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)

    asyncio.run(cut_off())
    eng.hang = False
    asyncio.run(st._sample(eng, a))  # the dataset's last sample
    assert (a.kept.counts.drafts, a.kept.counts.accepted) == (
        20,
        60,
    )  # 10 and 30 on each server, once
