"""The contract between the two sides: each request's command line parses back to the same request,
every request has exactly one handler, every answer reads back exactly, and what is not the contract
(an unknown subcommand, a renamed field, another release's envelope) is a clear error."""

from __future__ import annotations

import json
import re
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from remote import cli
from remote.common import protocol as P
from remote.common.answers import RestartAnswer, StopAnswer
from remote.common.caps import CapRow, Caps
from remote.common.jobspec import ServerSpec
from remote.common.wire import (
    FAULTS,
    Fault,
    HostFault,
    ProtocolError,
    envelope,
    fault_envelope,
    from_wire,
    read_envelope,
    to_wire,
)

SAMPLE = {  # a value other than the default, by the field's type
    bool: True,
    int: 7,
    float: 1.5,
    str: "x",
    dict: {"a": 1},
    Path: Path("/x/job.json"),
    tuple[tuple[str, int], ...]: (("B1", 3), ("B2", 0)),
    tuple[tuple[str, int | str], ...]: (("B1", 3), ("B2", "all")),
    tuple[str, ...]: ("B1", "B2"),
    int | str | None: 7,
    tuple[str, ...] | str | None: ("B1", "B2"),
    ServerSpec: ServerSpec(model="/m/k2", port=8123, args=("--tp", "8"), env={"HF_TOKEN": "t"}),
}


BY_NAME = {"stage": "draft"}  # a text flag whose values are named (--baseline goes with draft)


def sample(cls):
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        tp = hints[f.name]
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        key = tp if tp in SAMPLE else (inner[0] if len(inner) == 1 else tp)
        out[f.name] = BY_NAME.get(f.name, SAMPLE[key])
    return cls(**out)


@pytest.mark.parametrize("cls", P.REQUESTS, ids=lambda c: " ".join(c.command))
def test_a_requests_command_line_parses_back_to_it(cls):
    for req in (cls(), sample(cls)):
        back, root = P.parse(req.argv() + ["--root", "/h"])
        assert back == req and root == Path("/h")


@pytest.mark.parametrize("cls", P.REQUESTS, ids=lambda c: " ".join(c.command))
def test_a_request_sent_as_data_reads_back_to_it_on_the_host(cls):
    import io

    from remote.common.wire import request_json

    for req in (cls(), sample(cls)):
        assert cli.read_request(io.StringIO(request_json(req).decode())) == req


def test_a_request_of_another_shape_is_a_usage_fault():
    import io

    from remote.common.wire import HostFault

    for text in (
        '{"command": ["ctl", "nope"], "request": {}}',
        '{"command": ["ctl", "stop"]',
        "{}",
    ):
        with pytest.raises(HostFault) as e:
            cli.read_request(io.StringIO(text))
        assert e.value.fault.code == "usage"
    with pytest.raises(HostFault):  # strict: a field renamed on one side fails at once
        cli.read_request(io.StringIO('{"command": ["ctl", "stop"], "request": {"grace": 1}}'))


@pytest.mark.parametrize("cls", P.REQUESTS, ids=lambda c: " ".join(c.command))
def test_defaults_are_the_types_own(cls):
    """No flag given: every value is the dataclass default (argparse holds none of its own)."""
    back, _ = P.parse(list(cls.command))
    assert back == cls() and cls().argv() == list(cls.command)


def test_one_handler_per_request_and_each_one_exists():
    assert set(cli.HANDLERS) == set(P.REQUESTS)
    assert len({c.command for c in P.REQUESTS}) == len(P.REQUESTS)
    for cls in P.REQUESTS:
        assert callable(cli.handler(cls)), cls


ANSWERS = sorted({c.answer_type() for c in P.REQUESTS if c.answer}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", ANSWERS, ids=lambda c: c.__name__)
def test_every_answer_reads_back_exactly_through_json(cls):
    a = cls() if cls is not Fault else cls("usage", "m")
    wire = json.loads(json.dumps(envelope(a)))
    assert read_envelope(wire, cls) == a


def test_nested_answers_keep_their_types():
    a = RestartAnswer(mode="restart", stopped=StopAnswer(was_running=True, killed=[3]))
    a.caps = {"B1": CapRow(1, 2, "running")}
    back = from_wire(RestartAnswer, json.loads(json.dumps(to_wire(a))))
    assert back == a and isinstance(back.stopped, StopAnswer) and back.caps["B1"].target == 2


def test_a_renamed_field_is_an_error_not_a_default():
    wire = to_wire(StopAnswer(was_running=True))
    wire["was_runing"] = wire.pop("was_running")
    with pytest.raises(
        ProtocolError, match=r"unknown fields \['was_runing'\], missing \['was_running'\]"
    ):
        from_wire(StopAnswer, wire)


def test_another_releases_envelope_says_deploy():
    with pytest.raises(ProtocolError, match="protocol 1.*invoke deploy"):
        read_envelope({"ok": True, "was_running": False}, StopAnswer)


def test_a_fault_carries_its_code_fix_and_log():
    f = HostFault("busy", "a runner is already running", fix="use restart", log=["l1"], pid=4).fault
    back = read_envelope(json.loads(json.dumps(fault_envelope(f))), StopAnswer)
    assert back == Fault("busy", "a runner is already running", "use restart", ["l1"], {"pid": 4})
    with pytest.raises(ValueError, match="unknown fault code 'no-such-code'"):
        HostFault("no-such-code", "m")  # refused under python -O too: no assert


@pytest.mark.parametrize(
    "argv, words",
    [
        (["ctl", "frob"], "invalid choice: 'frob'"),
        (["server", "stat"], "invalid choice: 'stat'"),
        (["ctl", "stop", "--grace", "-1"], "--grace: expected seconds, 0 or more, got -1"),
        (["ctl", "start", "--cap", "B1"], "got 'B1': `--cap B1=500` caps it at 500, `=all`"),
        (["ctl", "start", "--cap", "B2:5"], "--cap expects DS=N, got 'B2:5': `--cap B2=5`"),
        (["ctl", "status", "--unknown"], "unrecognized arguments: --unknown"),
        ([], "the following arguments are required: command"),
    ],
)
def test_what_is_not_the_contract_is_a_usage_fault(argv, words, capsys):
    assert cli.main(argv) == FAULTS["usage"] == 2
    fault = read_envelope(json.loads(capsys.readouterr().out), StopAnswer)
    assert fault.code == "usage" and words in fault.message


def test_local_flags_name_the_flag_that_is_wrong():
    with pytest.raises(
        ValueError, match="--max-samples: expected a whole number \\(7000\\) or `all`, got 'ten'"
    ):
        P.RunArgs.from_text(max_samples="ten")
    with pytest.raises(ValueError, match="--max-tokens: expected a token count"):
        P.RunArgs.from_text(max_tokens="10Q")
    got = P.RunArgs.from_text(max_samples="7000", cap=["B2=5"], grace=12, datasets="B1,B2")
    assert got.applied_to(Caps()).to_dict() == {
        "max_samples": 7000,
        "caps": {"B2": 5},
        "max_tokens": None,
        "datasets": ["B1", "B2"],
        "stage": "generate",
        "eval_samples": None,
        "baseline": False,
    }
    for bad, words in (
        (dict(max_samples="0"), "--max-samples: expected a number >= 1 or `all`"),
        (dict(max_samples="-3"), "--max-samples: expected a number >= 1 or `all`, got -3"),
        (dict(cap=["B2=0"]), "N must be >= 1"),
        (dict(cap=["B2=-1"]), "N must be >= 1"),
        (
            dict(stage="hidden"),
            "--stage: expected one of generate, hidden-states, train, draft, baseline, got "
            "'hidden' (did you mean 'hidden-states'?)",
        ),
        (dict(baseline=True), "--baseline follows the draft stage"),
        (dict(stage="generate", baseline=True), "--baseline follows the draft stage"),
        (dict(eval_samples="0"), "--eval-samples: expected a number >= 1 or `all`"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            P.RunArgs.from_text(**bad)


KEPT = Caps(20, {"B1": 3, "B2": 9}, 10_000, ["B1", "B2", "B3"])


@pytest.mark.parametrize(
    "typed, after",
    [
        ({}, KEPT),  # a bare restart keeps everything
        ({"cap": ["B3=5"]}, Caps(20, {"B1": 3, "B2": 9, "B3": 5}, 10_000, ["B1", "B2", "B3"])),
        ({"max_samples": "7"}, Caps(7, {"B1": 3, "B2": 9}, 10_000, ["B1", "B2", "B3"])),
        ({"max_tokens": "5k"}, Caps(20, {"B1": 3, "B2": 9}, 5_000, ["B1", "B2", "B3"])),
        ({"datasets": "B2"}, Caps(20, {"B1": 3, "B2": 9}, 10_000, ["B2"])),
        ({"max_samples": "all"}, Caps(None, {"B1": 3, "B2": 9}, 10_000, ["B1", "B2", "B3"])),
        ({"cap": ["B1=all"]}, Caps(20, {"B2": 9}, 10_000, ["B1", "B2", "B3"])),
        ({"max_tokens": "none"}, Caps(20, {"B1": 3, "B2": 9}, None, ["B1", "B2", "B3"])),
        ({"datasets": "all"}, Caps(20, {"B1": 3, "B2": 9}, 10_000, None)),
        ({"reset_caps": True}, Caps()),
        ({"reset_caps": True, "cap": ["B2=4"]}, Caps(None, {"B2": 4})),
    ],
)
def test_a_cap_flag_changes_only_what_it_names(typed, after):
    change = P.RunArgs.from_text(**typed)
    assert change.applied_to(KEPT) == after
    assert change.changes_caps() == bool(typed)
    assert change.may_raise() == bool(typed)  # every one of these may raise a target
    # what a command starts the runner with changes no cap: it runs the job's kept caps
    assert change.own_flags().applied_to(KEPT) == KEPT


def test_a_stage_alone_raises_no_target():
    change = P.RunArgs.from_text(stage="hidden-states")
    assert change.changes_caps() and not change.may_raise()
    assert P.RunArgs.from_text(stage="generate", max_samples="9").may_raise()


def test_the_runners_flags_are_written_once_for_every_command_that_takes_them():
    run_flags = {f.name for f in fields(P.RunArgs)}
    for cls in (P.RunJob, P.CtlStart, P.CtlRestart):
        assert run_flags <= {f.name for f in fields(cls)}
    req = P.CtlRestart(max_samples=5, hard=True, wait=9.0, grace=3.0)
    assert req.run_flags() == P.RunArgs(max_samples=5, grace=3.0)
    assert "--hard" not in req.run_flags().argv()
    assert req.own_flags() == P.RunArgs(grace=3.0)  # what the watcher keeps: no cap change


def test_a_process_command_started_by_hand_says_its_error_in_words(capsys):
    assert cli.main(["run", "--max-samples", "ten"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: ") and "expected a whole number" in out.err


def test_plan_without_a_target_is_a_usage_fault(capsys, tmp_path):
    assert cli.main(["ctl", "plan", "--root", str(tmp_path)]) == 2
    fault = read_envelope(json.loads(capsys.readouterr().out), P.CtlPlan.answer_type())
    assert fault.code == "usage" and "--tokens-per-dataset must be positive" in fault.message


def run_flags(argv: list[str]) -> P.RunArgs:
    """The runner's flags as its command line (`python -m remote run ...`) gives them."""
    return P.parse(["run", *argv])[0].run_flags()


def test_runner_flags_that_do_not_parse_are_a_usage_fault():
    with pytest.raises(HostFault) as e:
        run_flags(["--max-samples", "7000", "--no-such-flag"])
    assert e.value.fault.code == "usage" and "--no-such-flag" in e.value.fault.message


def test_the_runner_comes_back_with_the_flags_it_had():
    from remote.common.protocol import GRACE_S

    argv = [
        "--max-samples",
        "7000",
        "--cap",
        "B2=2636",
        "--max-tokens",
        "10M",
        "--datasets",
        "B1,B2",
    ]
    a = run_flags(argv + ["--grace", "12", "--force"])
    back = run_flags(a.argv()[len(a.command) :])
    assert back == a
    assert (back.max_samples, back.cap, back.max_tokens, back.datasets) == (
        7000,
        (("B2", 2636),),
        10_000_000,
        ("B1", "B2"),
    )
    assert back.grace == 12.0 and back.force is True
    assert run_flags([]).grace == GRACE_S  # the default, stated once in protocol.py


def test_the_measures_flags_are_kept_with_the_caps_and_a_stage_typed_says_what_follows_it():
    kept = Caps(stage="draft", eval_samples=3, baseline=True)
    same = P.RunArgs.from_text(max_samples="5").applied_to(kept)  # a cap changed, or the watcher
    assert (same.stage, same.eval_samples, same.baseline) == ("draft", 3, True)
    again = P.RunArgs.from_text(stage="draft").applied_to(kept)  # typed without --baseline
    assert (again.eval_samples, again.baseline, again.follows()) == (3, False, None)
    back = P.RunArgs.from_text(eval_samples="all").applied_to(kept)
    assert back.eval_samples is None and back.follows() == "baseline"
    assert P.RunArgs.from_text(eval_samples="2").may_raise() is False  # no target grows


def test_a_value_of_another_type_on_the_wire_is_refused_naming_its_field():
    wire = to_wire(StopAnswer(was_running=True))
    wire["was_running"] = "yes"
    with pytest.raises(ProtocolError, match=r"StopAnswer.was_running: expected bool, got 'yes'"):
        from_wire(StopAnswer, wire)


def test_a_request_of_another_protocol_is_refused_before_anything_is_done():
    """A field may mean another thing in another release: an old deploytool's restart (its
    requests carry no number) or a newer one's is refused, not acted on and then misread."""
    import io
    import json

    from remote import cli
    from remote.common.wire import PROTOCOL, HostFault, request_json

    data = json.loads(request_json(P.CtlStop(grace=1.0)))
    for got in (None, PROTOCOL - 1, PROTOCOL + 1):
        sent = {k: v for k, v in data.items() if k != "protocol"}
        if got is not None:
            sent["protocol"] = got
        with pytest.raises(HostFault) as e:
            cli.read_request(io.StringIO(json.dumps(sent)))
        assert e.value.fault.code == "usage"
        version = "7 or older" if got is None else str(got)
        assert f"a request of protocol {version}; this host's release speaks {PROTOCOL}" in str(
            e.value
        )


def test_an_answer_of_a_newer_host_says_to_update_this_side():
    from remote.common.wire import PROTOCOL, ProtocolError, read_envelope

    with pytest.raises(ProtocolError, match="newer release .*update this checkout"):
        read_envelope({"protocol": PROTOCOL + 1, "ok": True, "answer": {}}, dict)
    with pytest.raises(ProtocolError, match="run `invoke deploy`"):
        read_envelope({"protocol": PROTOCOL - 1, "ok": True, "answer": {}}, dict)


def _wire_shape() -> str:
    """Every request, answer and fault type's fields, named and typed, as one text."""
    import dataclasses
    import typing

    from remote.common.wire import Fault

    seen: dict = {}

    def walk(cls):
        if not dataclasses.is_dataclass(cls) or cls in seen:
            return
        seen[cls] = [(f.name, str(f.type)) for f in dataclasses.fields(cls)]
        for hint in typing.get_type_hints(cls).values():
            for t in [hint, *typing.get_args(hint)]:
                for u in [t, *typing.get_args(t)]:
                    walk(u)

    for req in P.REQUESTS:
        walk(req)
        if req.answer:
            walk(req.answer_type())
    walk(Fault)
    return "\n".join(f"{c.__module__}.{c.__qualname__} {fs}" for c, fs in seen.items())


def test_the_wires_shape_is_pinned_to_its_protocol_number():
    """A field added to a request or an answer is a new protocol: the two sides of a deploy must
    refuse each other, not misread. Changed the wire? Bump PROTOCOL, and pin both here anew."""
    import hashlib

    from remote.common.wire import PROTOCOL

    lines = sorted(_wire_shape().splitlines())
    shape = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    assert (PROTOCOL, shape) == (15, "fbb74e497dc2f306"), "\n".join(lines)
