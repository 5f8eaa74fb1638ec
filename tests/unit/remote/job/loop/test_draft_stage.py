"""The draft stage's pieces: a draft's folder named for what it is, a dataset's counts as the growth
of the servers' counters (the first sample where it starts, a server started again counted whole)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from types import SimpleNamespace

from remote.common import stages
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
    st = DraftStage(runner, Caps(stage=stages.DRAFT), False)
    st.where = tmp_path
    st.open_pool(["u"])
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


class Clock:
    """The stage's clock, moved by the test alone."""

    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Answers(Metrics):
    """A server whose every try the test answers (or refuses) when it chooses."""

    def __init__(self):
        super().__init__()
        self.tries: asyncio.Queue = asyncio.Queue()

    async def complete(self, url, messages, est_tokens, key):
        answer = asyncio.get_running_loop().create_future()
        self.tries.put_nowait(answer)
        return await answer


def test_a_drafts_speed_through_a_kill_counts_only_the_time_its_requests_were_in_flight(
    tmp_path, monkeypatch
):
    """Issue #66: through a server down and a runner's kill -9 the speed read ×0.02 and ×2.20 of an
    unbroken one. Every answer here is made at 10 tok/s: so must the dataset's speed read."""
    from remote.common.records import Reply
    from remote.job.engine.client import EngineDown
    from remote.job.loop import draft_stage
    from remote.job.store.outputs import AppendFile, load_existing
    from remote.job.store.prompts import Prompt

    clock = Clock(100.0)
    monkeypatch.setattr(draft_stage, "SAMPLE_S", 1e9)  # the test samples when it chooses
    prompts = [Prompt(f"p{i}", i, [{"role": "user", "content": "q"}]) for i in range(3)]
    answers = tmp_path / "A.jsonl"

    def runner(todo: list) -> tuple[DraftStage, Measured]:
        st = stage(tmp_path)
        st.job = JobSpec(
            (DatasetSpec("A", "a.jsonl"),), engine=replace(st.job.engine, concurrency=1)
        )
        st.stop, st.clock = SimpleNamespace(asked=False), clock
        got = load_existing(answers, update_index=False)  # as a runner opens a dataset
        path = tmp_path / "A.counts.json"
        m = Measured(
            "A",
            todo,
            3,
            set(got.ids),
            AppendFile(answers),
            path,
            DraftKept.read(path) or DraftKept(),
            sum(got.tokens.values()),
        )
        st.sets = {"A": m}
        return st, m

    def answer(tokens: int) -> Reply:
        return Reply("a", None, "stop", 5, tokens, "m")

    async def first_runner(eng: Answers) -> None:
        st, a = runner(list(prompts))
        measuring = asyncio.ensure_future(st._measure(eng))
        (await eng.tries.get()).set_exception(EngineDown("refused"))  # p0 at 100: server down
        (ep,) = st.pool.endpoints
        while ep.reachable:
            await asyncio.sleep(0)
        clock.t = 160.0  # down for a minute (nothing in flight), until the pool's probe finds it
        st.pool.mark_up(ep, 160.0)
        try_again = await eng.tries.get()  # p0 again at 160, once its server is back
        clock.t = 163.0
        try_again.set_result(answer(30))
        p1 = await eng.tries.get()  # sent at 163, as p0 ended
        await st._sample(eng, a)  # the sampler's keep at 163: 3 s, 30 tokens
        clock.t = 165.0
        p1.set_result(answer(20))
        await eng.tries.get()  # p2 in flight, then kill -9: nothing more of this runner is kept
        kept = {p: p.read_bytes() for p in tmp_path.glob("*.json")}
        measuring.cancel()
        await asyncio.gather(measuring, return_exceptions=True)
        for p, data in kept.items():
            p.write_bytes(data)
        a.out.close()

    async def second_runner(eng: Answers) -> Measured:
        clock.t = 300.0  # the runner dead meanwhile: nothing in flight
        st, a = runner([prompts[2]])
        measuring = asyncio.ensure_future(st._measure(eng))
        p2 = await eng.tries.get()  # asked again, at 300
        clock.t = 302.0
        p2.set_result(answer(20))
        await measuring
        a.out.close()
        return a

    eng = Answers()
    asyncio.run(first_runner(eng))
    eng.tries = asyncio.Queue()
    a = asyncio.run(second_runner(eng))
    assert a.status(302.0, 300.0).mean_tokens_per_s == 10.0  # the old count read 1.1
    assert len(a.done) == 3 and a.tokens == 70  # every answer counts, once
    # p1's answer, after the last keep before the kill, is lost to the speed with its 2 s
    assert (a.kept.seconds, a.kept.tokens) == (5.0, 50)
    back = DraftKept.read(tmp_path / "A.counts.json")
    assert (back.seconds, back.tokens) == (5.0, 50)
