"""What a command leaves wanted: the runner with the flags it had, a stop said before anything is
signalled, and no watcher once nothing is wanted or recovery is off."""

from __future__ import annotations

import json
from types import SimpleNamespace

from remote.common.caps import Caps
from remote.common.jobspec import Paths
from remote.common.protocol import CtlStart, RunArgs
from remote.common.state import kept_caps
from remote.host.commands import supervised
from remote.host.facts import intent
from remote.host.facts.intent import keep_caps


def test_the_runner_is_wanted_with_its_flags_and_the_recover_settings(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    keep_caps(paths, Caps(7000, {"B2": 5}))  # what the start before it kept
    supervised.want_runner(
        paths,
        CtlStart(max_samples=7000, cap=(("B2", 5),), grace=4.0, recover={"backoff": 3}),
    )
    data = intent.read(paths)
    assert data.runner.wanted and data.recover_spec.backoff == 3.0
    back = data.runner.flags  # typed in the file: no command line to parse back
    # no cap change: the watcher's start runs the job's kept caps (a live re-cap may move them)
    assert back == RunArgs(grace=4.0) and not back.changes_caps()
    assert back.applied_to(kept_caps(paths)) == Caps(7000, {"B2": 5})
    keep_caps(paths, Caps(20))  # a live re-cap later: the watcher's start follows it
    assert intent.read(paths).runner.flags.applied_to(kept_caps(paths)) == Caps(20)
    raw = json.loads(paths.supervise.read_text())["runner"]
    assert raw["flags"]["grace"] == 4.0 and raw["flags"]["cap"] == [] and "argv" not in raw

    supervised.want_runner(paths, CtlStart(max_samples=10))  # no --recover: the settings stay
    assert intent.read(paths).recover_spec.backoff == 3.0


def test_a_stop_is_wanted_before_anything_is_signalled_and_then_no_watcher(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    supervised.want_runner(paths, CtlStart(max_samples=5))
    seen = []

    def stop():
        seen.append(intent.read(paths).runner)  # what the watcher would read meanwhile
        return SimpleNamespace(watcher="unset")

    out = supervised.stop_wanted(paths, "runner", stop)
    assert seen[0].wanted is False and seen[0].why == "stopped"
    assert out.watcher is None  # nothing is wanted: no watcher


def test_recovery_off_keeps_no_watcher_even_while_something_is_wanted(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    supervised.want_runner(paths, CtlStart(max_samples=5, recover={"enabled": False}))
    assert intent.read(paths).runner.wanted and supervised.keep_watcher(paths) is None
