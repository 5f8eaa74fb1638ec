"""The stage table: every entry's work is a runner stage that exists, its server and views are ones
the host and the screens know, and the answers' stage is the default of a job and of a screen."""

from __future__ import annotations

import pytest

from remote.common import stages as s
from remote.common.caps import Caps, stage
from remote.job.loop.runner import stage_work
from remote.job.loop.stage import Stage


@pytest.mark.parametrize("name", list(s.STAGES))
def test_every_entry_names_a_runner_stage_and_a_known_server_and_view(name):
    spec = s.STAGES[name]
    assert issubclass(stage_work(name), Stage)
    assert spec.server in (s.PLAIN, s.EXTRACT, s.SPECULATE, s.NO_SERVER)
    assert spec.shows in (s.ANSWERS, s.ROWS, s.MEASURE, s.TRAINING)
    assert spec.followed_by is None or spec.followed_by in s.STAGES
    assert stage(f" {name} ") == name  # what --stage takes is the table's names


def test_the_answers_are_the_first_stage_and_named_by_no_screen():
    assert Caps().stage == s.FIRST.name == s.GENERATE and s.FIRST.label == ""
    assert s.stage_of(None) is s.FIRST and s.stage_of("a later release's stage") is s.FIRST
    assert s.stage_of(s.DRAFT).label == s.DRAFT


def test_only_the_answers_make_records_and_no_stage_of_its_own_prompts_takes_new_caps_live():
    assert [n for n, e in s.STAGES.items() if e.makes_answers] == [s.GENERATE]
    assert [n for n, e in s.STAGES.items() if e.makes_rows] == [s.HIDDEN_STATES]
    assert [n for n, e in s.STAGES.items() if not e.live_recap] == [s.TRAIN, s.DRAFT, s.BASELINE]
    assert [n for n, e in s.STAGES.items() if not e.asks_server] == [s.TRAIN]
    assert Caps(stage=s.DRAFT, baseline=True).follows() == s.BASELINE
    assert Caps(stage=s.HIDDEN_STATES, baseline=True).follows() is None
    # the train stage's chain: its draft measured, then the baseline
    assert Caps(stage=s.TRAIN, baseline=True).follows() == s.DRAFT


def test_a_server_is_said_to_serve_the_first_stage_that_asks_its_flags():
    assert s.serving(s.EXTRACT) == s.HIDDEN_STATES
    assert s.serving(s.SPECULATE) == s.DRAFT
    assert s.serving(s.PLAIN) == s.GENERATE
