"""The rooms of remote/ and deploytool/, and which way imports run (docs/how-it-works.md: "Where things live"):

deploytool/  ->  remote.common  <-  remote.job  <-  remote.queries
                                <-  remote.host
remote.cli (the entry point) wires job, queries and host; job and host never import each other;
nothing in remote/ imports deploytool; host/release.py (but host/draft_copy.py, sent ahead of it),
host/draft_copy.py and host/preflight.py import nothing of the package (deploytool sends them as
source to hosts where nothing is deployed yet).

deploytool: commands, collection, program, usage (the entry) wire the rooms; ops (what is done on hosts) may
use connectors and config; connectors use config; views (what is shown) use only other views;
config uses only errors. A name imported for a type hint only (`if TYPE_CHECKING:`) is no import.

remote/job and remote/host in rooms stacked from the bottom (ROOMS), each import pointing down; no
folder over 20 modules; and no import circle anywhere, imports inside functions included.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

# the benchmark's own, which it reruns on any commit
from bench.house_counts import circles, file_imports
from tests.conftest import REPO

STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def imports(path: Path, source: str | None = None) -> set[str]:
    return file_imports(REPO, path, source)


def files(where: str) -> list[Path]:
    return sorted((REPO / where).rglob("*.py"))


def rel(p: Path) -> str:
    return str(p.relative_to(REPO))


@pytest.mark.parametrize("path", files("deploytool"), ids=rel)
def test_deploytool_imports_only_remote_common(path):
    bad = {m for m in imports(path) if m.startswith("remote") and not m.startswith("remote.common")}
    assert not bad, f"{rel(path)} imports {sorted(bad)}: only remote.common is shared"


@pytest.mark.parametrize("path", files("remote"), ids=rel)
def test_remote_rooms(path):
    mods = imports(path)
    room = path.relative_to(REPO / "remote").parts[0]
    assert room in ("common", "job", "host", "queries") or room.endswith(".py"), rel(path)
    assert not {m for m in mods if m.startswith("deploytool")}, f"{rel(path)} imports deploytool"
    ours = {m for m in mods if m.startswith("remote")}
    if room == "common":
        assert {m.split(".")[0] for m in mods} <= STDLIB | {"remote"}, f"{rel(path)}: stdlib only"
        assert all(m.startswith("remote.common") for m in ours), f"{rel(path)}: {sorted(ours)}"
    elif room in ("job", "queries"):  # queries read the job's files, never run anything
        assert not [m for m in ours if m.startswith("remote.host")], f"{rel(path)}: {sorted(ours)}"
        if room == "job":
            assert not [m for m in ours if m.startswith("remote.queries")], rel(path)
    elif room == "host":
        assert not [m for m in ours if m.startswith(("remote.job", "remote.queries"))], rel(path)
        if path.name in ("release.py", "draft_copy.py", "preflight.py"):  # source on a bare host
            alone = "remote.host.draft_copy" if path.name == "release.py" else "-"
            assert all(m.startswith(alone) for m in ours) and {
                m.split(".")[0] for m in mods
            } <= STDLIB | {"remote"}, rel(path)


# deploytool's rooms: what each may import of deploytool (besides itself and errors)
DEPLOYTOOL_ROOMS = {
    "config": set(),
    "connectors": {"config"},
    "ops": {"config", "connectors"},
    "views": set(),
}
ENTRY = {"commands", "collection", "program", "usage", "__main__"}


def deploytool_room(path: Path) -> str:
    parts = path.relative_to(REPO / "deploytool").parts
    return parts[0] if len(parts) > 1 else path.stem


@pytest.mark.parametrize("path", files("deploytool"), ids=rel)
def test_deploytool_rooms(path):
    room = deploytool_room(path)
    ours = {m.split(".")[1] for m in imports(path) if m.startswith("deploytool.")}
    ours -= {room, "errors"}
    if room in DEPLOYTOOL_ROOMS:  # and never the entry point
        assert ours <= DEPLOYTOOL_ROOMS[room], f"{rel(path)} ({room}) imports {sorted(ours)}"
    else:
        assert room in ENTRY | {"errors", "__init__"}, f"{rel(path)}: a module outside every room"
        if room in ("errors", "__init__"):
            assert not ours, f"{rel(path)} imports {sorted(ours)}"


def test_the_check_sees_a_violation():
    where = REPO / "remote" / "job" / "probe.py"  # never written: the source is given
    source = "from ..host import kill\nfrom . import pool\ndef f():\n    import deploytool.config\n"
    assert imports(where, source) >= {"remote.host.kill", "remote.job.pool", "deploytool.config"}
    view = REPO / "deploytool" / "views" / "probe.py"
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..ops import deploy\n"
    assert not [m for m in imports(view, source) if m.startswith("deploytool")]  # a hint only
    assert imports(view, source + "from ..ops.control import call\n") >= {"deploytool.ops.control"}


# a loose guard against a god module, not where a module is cut: a module holds one idea whatever
# its length, and is split when it holds two
MODULE_LINES = 800


def sizes() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(module, lines) over MODULE_LINES and (function, lines) over 60, in remote/ and deploytool/."""
    modules, functions = [], []
    for path in files("remote") + files("deploytool"):
        src = path.read_text()
        if len(src.splitlines()) > MODULE_LINES:
            modules.append((rel(path), len(src.splitlines())))
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    functions.append((f"{rel(path)}:{node.name}", n))
    return modules, functions


def test_no_god_module_and_no_function_over_60():
    modules, functions = sizes()
    assert modules == [] and functions == [], "split them: one room, one job each"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path], sources: dict[str, str] | None = None) -> dict[str, set[str]]:
    """module -> the modules of ours it imports, at the top or inside a function."""
    names = {module_name(p): p for p in paths}
    graph = {}
    for name, path in names.items():
        found = imports(path, (sources or {}).get(name))
        graph[name] = {m for m in found if m in names and m != name}
    return graph


def test_no_import_circle_function_level_imports_included():
    graph = import_graph(files("remote") + files("deploytool"))
    assert circles(graph) == []


def test_the_circle_check_sees_one():
    a, b = REPO / "remote" / "host" / "a.py", REPO / "remote" / "host" / "b.py"
    graph = import_graph(
        [a, b],
        {"remote.host.a": "from . import b\n", "remote.host.b": "def f():\n    from .a import x\n"},
    )
    assert circles(graph) == [["remote.host.a", "remote.host.b"]]


# Inside remote/job and remote/host, rooms stacked from the bottom; an import may point down or
# along its own room, never up. remote/job: the stores on disk (the hidden states', and the train
# stage's data and checkpoints above them), the engine (its client, streams, kept
# tokens, the pool of servers), the observers (status, telemetry, alerts), the run loop on top.
# remote/host: facts of the machine, one module per managed process (start, stop, check), the
# watcher that keeps them, the commands that record intent. The watcher uses the mechanism, never a
# command; what the host is asked about the job's files (queries) sits apart in remote/queries.
ROOMS = {
    "job": ["store", "hidden", "train", "engine", "observe", "loop"],
    "host": ["facts", "processes", "watcher", "commands"],
}
MAX_MODULES = 20  # a loose guard: a folder past it is a room holding several; not where one is cut


def stack_room(name: str) -> tuple[str, int] | None:
    """remote.job.engine.pool -> ("job", 1); None for what is in no stack."""
    parts = name.split(".")
    if len(parts) < 4 or parts[0] != "remote" or parts[1] not in ROOMS:
        return None
    return parts[1], ROOMS[parts[1]].index(parts[2]) if parts[2] in ROOMS[parts[1]] else -1


STACKED = files("remote/job") + files("remote/host")


@pytest.mark.parametrize("path", STACKED, ids=rel)
def test_stacked_rooms_import_down(path):
    name = module_name(path)
    if name in ("remote.host.release", "remote.host.draft_copy", "remote.host.preflight"):
        return  # standalone, checked above
    mine = stack_room(name)
    assert mine is not None and mine[1] >= 0, f"{rel(path)}: in no room of {ROOMS}"
    up = [m for m in imports(path) if (r := stack_room(m)) and r[0] == mine[0] and r[1] > mine[1]]
    assert not up, f"{rel(path)} ({ROOMS[mine[0]][mine[1]]}) imports a room above it: {up}"


def test_the_room_check_sees_an_arrow_up():
    keepers = REPO / "remote" / "host" / "watcher" / "keepers.py"
    found = imports(keepers, "def _start():\n    from ..commands import ctl\n")
    assert "remote.host.commands.ctl" in found
    assert stack_room("remote.host.commands.ctl")[1] > stack_room(module_name(keepers))[1]


def test_no_folder_over_15_modules():
    folders = {}
    for path in files("remote") + files("deploytool"):
        if path.stem != "__init__":
            folders.setdefault(rel(path.parent), []).append(path.stem)
    big = {f: len(m) for f, m in folders.items() if len(m) > MAX_MODULES}
    assert not big, f"split them into rooms: {big}"


def test_no_test_imports_another_and_bench_imports_no_test():
    """Shared helpers live in fixture modules (conftest, tests/helpers/, tests/unit/fakes.py)."""
    bad = []
    for path in files("tests") + files("bench"):
        for m in imports(path):
            leaf = m.split(".")[-1]
            if m.startswith("tests.") and leaf.startswith("test_") and m != module_name(path):
                bad.append(f"{rel(path)} imports {m}")
    assert not bad, bad


def test_unit_tests_mirror_the_tree():
    """tests/unit/remote/job/engine/test_pool.py tests remote/job/engine/pool.py: a unit test whose
    module moved or went is moved or goes with it."""
    unit = REPO / "tests" / "unit"
    astray = []
    for t in unit.rglob("test_*.py"):
        under = t.parent.relative_to(unit)
        module = REPO / under / (t.stem[len("test_") :] + ".py")
        if not module.exists():
            astray.append(str(t.relative_to(REPO)))
    assert not astray, f"no module at the mirrored path: {astray}"


# modules with no unit test of their own, each with where it is tested instead
NO_UNIT_TEST = {
    "deploytool/__main__.py": "two lines: `python -m deploytool`, run by every test that types a command",
    "deploytool/connectors/ssh.py": "against a real sshd: test_connectors, test_deploy",
    "deploytool/ops/pull_hidden.py": "pull --hidden-states --free on the local host: test_hidden_stage",
    "deploytool/program.py": "the invoke program as typed: test_startup, test_front_door",
    "deploytool/collection.py": "the invoke tasks as typed from the repository root: test_front_door",
    "remote/__main__.py": "two lines: `python -m remote`, run by every host command",
    "remote/cli.py": "the host's command line, run by every host command; its imports: test_layering",
    "remote/common/answers.py": "every answer read back exactly: unit/remote/common/test_protocol",
    "remote/common/flags.py": "restart's flags as typed: test_caps_kept, test_restart_stop_status",
    "remote/host/commands/ctl.py": "every host command dispatches through it",
    "remote/job/observe/telemetry.py": "the sampling loop against servers' /metrics: test_telemetry",
    "remote/host/commands/server_commands.py": "server start/stop/status: test_server_start_stop",
    "remote/host/facts/intent.py": "what should run, obeyed by the watcher: test_recovery",
    "remote/job/loop/runner.py": "the runner as a process: test_runner, test_continue, test_recovery",
    "remote/job/loop/generate.py": "the generation stage in its runner: test_runner, test_continue",
    "remote/job/loop/stage.py": "what every stage shares, through each: test_hidden_stage, test_draft_stage",
    "remote/job/store/prompts.py": "prompt files and their index: test_runner, test_prompt_reload",
    "remote/run_inference.py": "the runner under the name users know: test_restart_stop_status",
}


def test_every_module_has_its_unit_test_or_says_where_it_is_tested():
    missing, needless = [], []
    for root in ("deploytool", "remote"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            rel_path = str(path.relative_to(REPO))
            test = REPO / "tests" / "unit" / path.parent.relative_to(REPO) / f"test_{path.name}"
            if test.exists() and rel_path in NO_UNIT_TEST:
                needless.append(rel_path)
            elif not test.exists() and rel_path not in NO_UNIT_TEST:
                missing.append(rel_path)
    gone = [m for m in NO_UNIT_TEST if not (REPO / m).exists()]
    assert not missing, f"no unit test and no word on where they are tested: {missing}"
    assert not needless and not gone, f"NO_UNIT_TEST lists modules it need not: {needless + gone}"
