"""The draft stage, typed as a user types it (the venv's `invoke` from the repository root, on a
`local` host whose job talks to the server deploytool starts there: the stand-in `vllm`, which counts
speculative decoding as vLLM does): the held-out prompts of each dataset (those after its cap)
answered with the draft, one dataset at a time, the mean acceptance length of each from the server's
own counters; never in the training outputs; through a kill -9 of the runner."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading

import pytest
import yaml

from remote.common.jobspec import Paths, flag_value
from remote.common.state import ServerRecord
from tests.conftest import REPO, ctrl_c_as_typed, piped_env, records, status, wait_for
from tests.helpers.as_typed import INVOKE, ok, typed
from tests.helpers.draft_job import draft_of, drafted_job


@contextlib.contextmanager
def stopped_after(config):
    """The job and its server stopped when the test ends, passed or not."""
    try:
        yield
    finally:
        typed("invoke stop", config)
        typed("invoke server.stop", config)


def trained(config, samples: str = "4") -> None:
    for line in ("invoke deploy", f"invoke restart --max-samples {samples}", "invoke tail"):
        ok(line, config)


def results(root) -> dict:
    (folder,) = [p for p in Paths(root).drafts.iterdir() if p.is_dir()]
    return {ds: json.loads((folder / f"{ds}.counts.json").read_text()) for ds in ("B1", "B2")} | {
        "folder": folder
    }


def test_the_draft_is_measured_per_dataset_on_prompts_no_training_saw(tmp_path):
    draft = draft_of(5)
    config, root = drafted_job(tmp_path, draft)
    with stopped_after(config):
        trained(config)  # the first 4 prompts of each dataset answered for training
        out = ok("invoke restart --stage draft", config)
        assert "box: the server runs without the draft the draft stage measures: restarting" in out
        spec = json.loads(
            flag_value(ServerRecord.live(Paths(root).server_pid).argv, "--speculative-config")
        )
        assert spec == {"method": "eagle3", "model": "org/kimi-eagle3", "num_speculative_tokens": 3}
        assert "draft finished" in ok("invoke tail", config)
        got = results(root)
        for ds, length in (("B1", 4.0), ("B2", 2.0)):
            c = got[ds]["counts"]
            assert 1 + c["accepted"] / c["drafts"] == length
            answers = [
                json.loads(x) for x in (got["folder"] / f"{ds}.jsonl").read_text().splitlines()
            ]
            # the held-out prompts: those after the cap of 4, five of them, each once
            assert sorted(a["index"] for a in answers) == [4, 5, 6, 7, 8]
        # the training outputs are as they were: the first 4 prompts' answers
        assert sorted(r["index"] for r in records(root, "B1")) == [0, 1, 2, 3]
        st = status(root)
        assert st["stage"] == "draft" and st["datasets"]["B1"]["done"] == 5
        assert st["datasets"]["B2"]["draft"]["per_position"] == [
            st["datasets"]["B2"]["draft"]["drafts"],
            0,
            0,
        ]
        shown = ok("invoke status", config)
        assert "B1" in shown and "4.00" in shown and "2.00" in shown
        assert "acceptance length 4.00" in ok("invoke tail --once", config)
        # another draft named: the server running the first is started again with it, and its
        # results go to a folder of its own
        data = yaml.safe_load(config.read_text())
        data["server"]["draft"]["model"] = "org/kimi-eagle3-ours"
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        ok("invoke deploy", config)
        out = ok("invoke restart --stage draft", config)
        assert "the server runs another draft than hosts.yaml's server.draft: restarting" in out
        argv = ServerRecord.live(Paths(root).server_pid).argv
        assert (
            json.loads(flag_value(argv, "--speculative-config"))["model"] == "org/kimi-eagle3-ours"
        )
        assert "draft finished" in ok("invoke tail", config)
        assert len([p for p in Paths(root).drafts.iterdir() if p.is_dir()]) == 2
        # the baseline: the same prompts, the server without a draft
        out = ok("invoke restart --stage baseline", config)
        assert "the server runs with the draft stage's draft: restarting" in out
        assert (
            flag_value(ServerRecord.live(Paths(root).server_pid).argv, "--speculative-config")
            is None
        )
        assert "baseline finished" in ok("invoke tail", config)
        base = [p for p in Paths(root).drafts.iterdir() if p.name.startswith("baseline-")]
        assert len(base) == 1 and len((base[0] / "B1.jsonl").read_text().splitlines()) == 5
        # the report lays the two drafts and the baseline side by side, per dataset
        page = tmp_path / "r.html"
        ok(f"invoke report --out {page}", config)
        section = page.read_text().split("<h2>Drafts measured</h2>")[1]
        assert section.index("org/kimi-eagle3<br>") < section.index("org/kimi-eagle3-ours<br>")
        assert section.count("<b>4.00</b>") == 2 and section.count("<b>2.00</b>") == 2
        assert "no draft (baseline)" in section


def test_a_runner_killed_mid_dataset_loses_no_count_and_answers_each_prompt_once(tmp_path):
    draft = draft_of(8)
    config, root = drafted_job(tmp_path, draft, delay=0.2)
    with stopped_after(config):
        trained(config)  # the first 4 prompts of each dataset answered for training
        ok("invoke restart --stage draft", config)
        folder = lambda: [p for p in Paths(root).drafts.iterdir() if p.is_dir()]  # noqa: E731

        def answered() -> int:
            f = folder()
            path = f[0] / "B1.jsonl" if f else None
            return len(path.read_text().splitlines()) if path and path.exists() else 0

        wait_for(lambda: answered() >= 2, timeout=60, what="two of B1's answers")
        # a cap changed under the stage: its held-out prompts follow the caps, so the runner
        # starts again on them (never a live re-cap refused)
        pid = status(root)["pid"]
        out = ok("invoke restart --cap B1=6", config)  # B1 measured anew: prompts 6-11
        assert "stop runner" in out.lower() or "started runner pid" in out
        wait_for(lambda: status(root)["pid"] != pid, timeout=60, what="a new runner")
        wait_for(lambda: answered() >= 3, timeout=60, what="a third of B1's answers")
        os.kill(status(root)["pid"], signal.SIGKILL)
        ok("invoke restart", config)  # the kept stage, as the watcher would
        assert "draft finished" in ok("invoke tail", config)
        got = results(root)
        for ds, length, n in (("B1", 4.0, 6), ("B2", 2.0, 8)):
            c = got[ds]["counts"]
            assert 1 + c["accepted"] / c["drafts"] == length
            ids = [
                json.loads(x)["id"]
                for x in (got["folder"] / f"{ds}.jsonl").read_text().splitlines()
            ]
            assert len(ids) == len(set(ids)) == n
        first = [p for p in Paths(root).drafts.rglob("before/*/B1.jsonl")]
        assert len(first) == 1 and first[0].read_text()  # B1's answers before the cap moved: kept


def test_no_draft_named_is_one_line_before_anything_is_stopped(tmp_path):
    config, root = drafted_job(tmp_path, None)
    with stopped_after(config):
        trained(config)  # the first 4 prompts of each dataset answered for training
        plain = ServerRecord.live(Paths(root).server_pid)
        res = typed("invoke restart --stage draft", config)
        assert res.returncode != 0
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "server.draft.model" in lines[0], res.stderr
        assert ServerRecord.live(Paths(root).server_pid).pid == plain.pid  # left running
        assert status(root)["stage"] == "generate"
        # a draft folder that is not on the host: bad input, said before anything is stopped
        gone = yaml.safe_load(config.read_text())
        gone["server"]["draft"] = {"model": str(tmp_path / "no-such-draft")}
        config.write_text(yaml.safe_dump(gone))
        ok("invoke deploy", config)
        res = typed("invoke restart --stage draft", config)
        assert res.returncode == 2, res.stdout + res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "no-such-draft: no such folder on this host" in lines[0], lines
        assert ServerRecord.live(Paths(root).server_pid).pid == plain.pid  # left running
        assert status(root)["stage"] == "generate"
        # a draft the server refuses at load: its own log line, the job's stage as it was
        gone["server"]["draft"] = {"model": "org/mismatched-eagle3"}
        config.write_text(yaml.safe_dump(gone))
        ok("invoke deploy", config)
        res = typed("invoke restart --stage draft", config)
        assert res.returncode == 1, res.stdout + res.stderr
        last = res.stderr.strip().splitlines()[-1]  # the error, after the server's last lines
        assert "does not match the target's 163840" in last, res.stderr
        assert "invoke restart --stage generate` starts it again" in last, last
        assert status(root)["stage"] == "generate"
        bad = yaml.safe_load(config.read_text())
        bad["server"]["draft"] = {"model": "x", "method": "eagel3"}
        config.write_text(yaml.safe_dump(bad))
        res = typed("invoke status", config)
        assert res.returncode == 2 and "did you mean 'eagle3'" in res.stderr, res.stderr


def test_eval_samples_typed_on_the_restart_is_kept_for_the_baseline_and_the_watcher(tmp_path):
    draft = draft_of(5)
    config, root = drafted_job(tmp_path, draft)
    with stopped_after(config):
        trained(config)  # the first 4 prompts of each dataset answered for training
        res = typed("invoke restart --stage draft --eval-samples 0", config)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert status(root)["stage"] == "generate"  # refused before anything was touched
        out = ok("invoke restart --stage draft --eval-samples 3", config)
        assert "eval-samples server.draft's → 3" in out, out
        assert json.loads(Paths(root).caps.read_text())["eval_samples"] == 3
        assert "draft finished" in ok("invoke tail", config)
        folder = results(root)["folder"]
        for ds in ("B1", "B2"):
            answers = [json.loads(x) for x in (folder / f"{ds}.jsonl").read_text().splitlines()]
            assert sorted(a["index"] for a in answers) == [4, 5, 6]  # 3, not hosts.yaml's 5
        ok("invoke restart --stage baseline", config)  # the kept 3: the same prompts
        assert "baseline finished" in ok("invoke tail", config)
        (base,) = [p for p in Paths(root).drafts.iterdir() if p.name.startswith("baseline-")]
        indexes = [json.loads(x)["index"] for x in (base / "B1.jsonl").read_text().splitlines()]
        assert sorted(indexes) == [4, 5, 6]
        assert status(root)["datasets"]["B1"]["target"] == 3


def test_baseline_typed_with_the_draft_follows_it_started_by_the_watcher(tmp_path):
    draft = draft_of(5)
    notified = tmp_path / "told"
    config, root = drafted_job(tmp_path, draft, notify=f'echo "$DEPLOYTOOL_MESSAGE" >> {notified}')
    with stopped_after(config):
        trained(config)  # the first 4 prompts of each dataset answered for training
        for line, words in (
            ("invoke restart --stage generate --baseline", "--baseline follows the draft stage"),
            ("invoke restart --baseline", "--baseline follows the draft stage"),
        ):
            res = typed(line, config)
            assert res.returncode == 2 and words in res.stderr, res.stderr
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        data = yaml.safe_load(config.read_text())
        config.write_text(yaml.safe_dump(dict(data, recover=False), sort_keys=False))
        res = typed("invoke restart --stage draft --baseline", config)
        assert res.returncode == 2 and "`recover:` has it off" in res.stderr, res.stderr
        # the simulated engine has no draft to measure: one line, nothing touched
        sim = dict(data, job=dict(data["job"], engine={"kind": "simulate"}))
        config.write_text(yaml.safe_dump(sim, sort_keys=False))
        for stage, words in (
            ("draft", "to measure"),
            ("baseline", "to measure a baseline against"),
        ):
            res = typed(f"invoke restart --stage {stage} --dry-run", config)
            assert res.returncode == 2, res.stderr
            assert f"simulated engine has no draft {words}: the stage needs vLLM" in res.stderr
            assert "job.engine.kind: openai and server:" in res.stderr  # what to do
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        assert status(root)["stage"] == "generate"  # each refused before anything was touched
        words = ok("invoke restart --stage draft --baseline --dry-run", config)
        assert "stage generate → draft, then baseline (the watcher starts it)" in words, words
        words = ok("invoke restart --stage draft --baseline", config)
        assert "stage generate → draft, then baseline (the watcher starts it)" in words, words
        words = ok("invoke tail", config)  # one wait: the draft, then the baseline after it
        assert "baseline finished" in words, words
        st = status(root)
        assert st["stage"] == "baseline" and all(d["done"] == 5 for d in st["datasets"].values())
        folders = sorted(p.name for p in Paths(root).drafts.iterdir() if p.is_dir())
        assert len(folders) == 2 and folders[0].startswith("baseline-")
        for name in folders:
            indexes = [
                json.loads(x)["index"]
                for x in (Paths(root).drafts / name / "B1.jsonl").read_text().splitlines()
            ]
            assert sorted(indexes) == [4, 5, 6, 7, 8]  # the same held-out prompts
        argv = ServerRecord.live(Paths(root).server_pid).argv
        assert flag_value(argv, "--speculative-config") is None  # started again without it
        caps = json.loads(Paths(root).caps.read_text())
        assert caps["stage"] == "baseline" and caps["baseline"] is False
        # a stage that follows is no failure: nothing died, no restart of the budget spent
        events = Paths(root).recover_log
        log = (root / "logs" / "watcher.log").read_text()  # shown with a failure below: why
        assert not events.exists() or not events.read_text().strip(), events.read_text() + log
        assert "the draft stage finished: the baseline stage next" in log, log
        assert "server started for the next stage" in log, log
        # told as it goes: the draft's end is not the job's (each message once, in order)
        wait_for(
            lambda: notified.exists() and len(notified.read_text().splitlines()) >= 3, 30, what="3"
        )
        words = [line.split(": ", 1)[1] for line in notified.read_text().splitlines()]
        order = [s.split(";")[0] for s in words]
        assert order == ["finished", "draft finished", "finished"], (words, log)
        assert words[1].startswith("draft finished; the baseline follows"), words


def test_a_stop_while_the_baseline_server_loads_ends_the_wait_and_says_why(tmp_path):
    draft = draft_of(3)
    go = tmp_path / "plain-server-may-load"
    config, root = drafted_job(tmp_path, draft, server_args=["--fake-plain-load-until", str(go)])
    go.touch()
    try:
        trained(config)
        go.unlink()  # from now on a server without the draft loads until the test says
        ok("invoke restart --stage draft --baseline", config)
        watch = Paths(root).watch_state
        wait_for(
            lambda: (
                json.loads(watch.read_text()).get("next_stage") == "baseline"
                and json.loads(watch.read_text())["server"]["state"] == "starting"
            ),
            timeout=60,
            what="the watcher starting the baseline's server",
        )
        shown = ok("invoke status", config)
        assert "the baseline stage next" in shown and "RECOVERING" not in shown, shown
        stopped = ok("invoke stop", config)
        assert "the server swap for the baseline stage ends (it was at: " in stopped, stopped
        out = ok("invoke tail", config)  # ends: nothing will follow any more
        assert "the baseline stage was not started: the job was stopped" in out, out
        assert status(root)["stage"] == "draft"  # the draft's verdict, kept
    finally:
        go.touch()
        typed("invoke stop", config)
        typed("invoke server.stop", config)


@pytest.mark.parametrize("gone_by", [signal.SIGKILL, signal.SIGINT])
def test_the_laptop_gone_while_the_drafts_server_loads_leaves_the_host_to_finish_it(
    tmp_path, gone_by
):
    """`restart --stage draft` asks once: the host stops the runner and the server, starts the
    server with the draft and starts the stage's runner once it has loaded, whoever waits. The
    laptop's command (its whole process group) is killed -9 mid-load, or Ctrl-C'd (then it says
    the host goes on, and the way back); the draft is measured all the same, and the next look
    says how the swap ended."""
    gate = tmp_path / "servers-may-load"
    config, root = drafted_job(tmp_path, draft_of(3), server_args=["--fake-load-until", str(gate)])
    gate.touch()
    with stopped_after(config):
        trained(config)
        gate.unlink()  # the next server loads until the test says
        laptop = subprocess.Popen(
            [INVOKE, "restart", "--stage", "draft"],
            cwd=REPO,
            env=dict(piped_env(), DEPLOYTOOL_CONFIG=str(config)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: all of it gone, as a lid closed
            preexec_fn=ctrl_c_as_typed,
        )
        switch = Paths(root).switch
        wait_for(
            lambda: switch.exists() and json.loads(switch.read_text())["step"] == "loading",
            timeout=60,
            what="the draft's server loading",
        )
        os.killpg(laptop.pid, gone_by)
        out, _ = laptop.communicate(timeout=120)
        if gone_by == signal.SIGINT:
            assert laptop.returncode == 1 and "Traceback" not in out, out
            assert "detached: the host goes on with what it was asked" in out, out
            assert "invoke restart --stage generate` takes it back to the answers" in out, out
        assert "loading" in ok("invoke status", config)  # the host waits for the model alone
        gate.touch()
        out = ok("invoke tail", config)
        assert "draft finished" in out, out
        assert json.loads(switch.read_text())["step"] == "done"
        got = results(root)
        c = got["B1"]["counts"]
        assert 1 + c["accepted"] / c["drafts"] == 4  # B1's: 3 of 3 accepted
        assert len((got["folder"] / "B1.jsonl").read_text().splitlines()) == 3
        argv = ServerRecord.live(Paths(root).server_pid).argv
        assert flag_value(argv, "--speculative-config") is not None


def test_back_to_answers_mid_measure_stops_the_runner_before_the_server_goes(tmp_path):
    draft = draft_of(8)
    hold = tmp_path / "answers-held"
    config, root = drafted_job(
        tmp_path, draft, delay=0.3, server_args=["--fake-answer-hold", str(hold)]
    )
    with stopped_after(config):
        trained(config)  # the first 4 prompts of each dataset answered for training
        ok("invoke restart --stage draft", config)
        wait_for(
            lambda: any(
                p.name == "B1.jsonl" and p.stat().st_size
                for p in Paths(root).drafts.rglob("*.jsonl")
            ),
            timeout=60,
            what="a first answer of the draft stage",
        )
        hold.touch()  # the answers in flight now wait: the drain must wait for them
        log = root / "logs" / "runner.log"

        def release_once_drained():
            wait_for(lambda: "drain: no new requests" in log.read_text(), 120, what="the drain")
            hold.unlink()

        releaser = threading.Thread(target=release_once_drained, daemon=True)
        releaser.start()
        out = ok("invoke restart --stage generate --max-samples 6 --drain", config)
        releaser.join()
        assert "the server runs with the draft stage's draft: restarting" in out
        assert "finished" in ok("invoke tail", config)
        assert status(root)["stage"] == "generate" and len(records(root, "B1")) == 6
        log = (root / "logs" / "runner.log").read_text()
        assert "counts no speculative decoding" not in log  # never failed for a server swapped
        assert "abandoned" not in log  # --drain: its answers in flight finished first


def test_a_prompts_file_of_the_users_own_stands_in_for_the_held_out_prompts(tmp_path):
    draft = draft_of(5)
    config, root = drafted_job(tmp_path, draft)
    own = tmp_path / "data" / "prompts" / "B2.eval.jsonl"
    own.write_text(
        "".join(
            json.dumps(
                {"id": f"B2-eval-{i}", "messages": [{"role": "user", "content": f"held {i} of B2"}]}
            )
            + "\n"
            for i in range(3)
        )
    )
    data = yaml.safe_load(config.read_text())
    data["job"]["datasets"]["B2"]["eval_prompts"] = "data/prompts/B2.eval.jsonl"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    with stopped_after(config):
        trained(config, "all")  # every prompt trained on: B1 has none held out, B2 its own file
        ok("invoke restart --stage draft", config)
        assert "draft finished" in ok("invoke tail", config)
        (folder,) = [p for p in Paths(root).drafts.iterdir() if p.is_dir()]
        answers = [json.loads(x)["id"] for x in (folder / "B2.jsonl").read_text().splitlines()]
        assert sorted(answers) == ["B2-eval-0", "B2-eval-1", "B2-eval-2"]
        st = status(root)
        assert "B1" not in st["datasets"] and st["datasets"]["B2"]["done"] == 3
        assert "no held-out prompts in B1" in st["message"]


def test_a_draft_folder_of_this_machine_is_sent_by_deploy_and_measured_from_its_copy(tmp_path):
    """`server.draft.model: ./drafts/kimi-eagle3`, a folder beside hosts.yaml and not on the host:
    deploy sends it (then only a file that changed), and the stage's server runs the copy."""
    mine = tmp_path / "drafts" / "kimi-eagle3"
    (mine / "weights").mkdir(parents=True)
    (mine / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    (mine / "weights" / "model.safetensors").write_bytes(os.urandom(3000))
    config, root = drafted_job(tmp_path, dict(draft_of(5), model="./drafts/kimi-eagle3"))
    copy = Paths(root).draft_copies / "kimi-eagle3"
    with stopped_after(config):
        out = ok("invoke deploy --dry-run", config)
        assert "./drafts/kimi-eagle3 → data/draft-models/kimi-eagle3: would send 2 files" in out
        assert not root.exists()  # nothing written on the host
        out = ok("invoke deploy", config)
        assert "draft    ./drafts/kimi-eagle3 → data/draft-models/kimi-eagle3: sent 2 files" in out
        for rel in ("config.json", "weights/model.safetensors"):
            assert (copy / rel).read_bytes() == (mine / rel).read_bytes()
        out = ok("invoke deploy", config)
        assert "nothing changed" in out and "kimi-eagle3: unchanged (2 files, 3.0 KiB)" in out
        # one file changed here: that file alone is sent
        (mine / "config.json").write_text('{"architectures": ["Eagle3"], "retrained": true}')
        out = ok("invoke deploy --dry-run", config)
        assert "would send 1 file, 48 B (of 2 files, 3.0 KiB)" in out, out
        assert "retrained" not in (copy / "config.json").read_text()  # a dry run sends nothing
        out = ok("invoke deploy", config)
        assert "kimi-eagle3: sent 1 file, 48 B (of 2 files, 3.0 KiB)" in out, out
        assert (copy / "config.json").read_text() == (mine / "config.json").read_text()
        trained(config)  # the first 4 prompts of each dataset answered for training
        ok("invoke restart --stage draft", config)
        spec = json.loads(
            flag_value(ServerRecord.live(Paths(root).server_pid).argv, "--speculative-config")
        )
        assert spec["model"] == str(copy)  # the host's copy, which the stand-in vLLM loaded
        assert "draft finished" in ok("invoke tail", config)
        got = results(root)
        assert got["folder"].name.startswith("kimi-eagle3-")
        c = got["B1"]["counts"]
        assert 1 + c["accepted"] / c["drafts"] == 4.0
