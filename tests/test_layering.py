"""The rooms of remote/ and deploytool/, and which way imports run (docs/how-it-works.md: "Where things live"):

deploytool/  ->  remote.common  <-  remote.job
                                <-  remote.host
remote.cli (the entry point) wires job and host; job and host never import each other;
nothing in remote/ imports deploytool; host/release.py and host/preflight.py import nothing of
the package (deploytool sends them as source to hosts where nothing is deployed yet).

deploytool: commands, tasks, program, usage (the entry) wire the rooms; ops (what is done on hosts) may
use connectors and config; connectors use config; views (what is shown) use only other views;
config uses only errors. A name imported for a type hint only (`if TYPE_CHECKING:`) is no import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def imports(path: Path, source: str | None = None) -> set[str]:
    """Every module a file imports (relative imports made absolute), whatever the nesting."""
    package = list(path.relative_to(REPO).with_suffix("").parts)[:-1]
    found = set()
    tree = ast.parse(path.read_text() if source is None else source)
    hints_only = {
        id(n)
        for top in ast.walk(tree)
        if isinstance(top, ast.If) and ast.unparse(top.test) == "TYPE_CHECKING"
        for n in ast.walk(top)
    }
    for node in ast.walk(tree):
        if id(node) in hints_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:  # from . import a, b: each is a module
                    found |= {f"{mod}.{a.name}" for a in node.names}
                    continue
            else:
                mod = node.module
            found.add(mod)
    return found


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
    assert not {m for m in mods if m.startswith("deploytool")}, f"{rel(path)} imports deploytool"
    ours = {m for m in mods if m.startswith("remote")}
    if room == "common":
        assert {m.split(".")[0] for m in mods} <= STDLIB | {"remote"}, f"{rel(path)}: stdlib only"
        assert all(m.startswith("remote.common") for m in ours), f"{rel(path)}: {sorted(ours)}"
    elif room == "job":
        assert not [m for m in ours if m.startswith("remote.host")], f"{rel(path)}: {sorted(ours)}"
    elif room == "host":
        assert not [m for m in ours if m.startswith("remote.job")], f"{rel(path)}: {sorted(ours)}"
        if path.name in ("release.py", "preflight.py"):  # run as source on a bare host
            assert not ours and {m.split(".")[0] for m in mods} <= STDLIB, rel(path)


# deploytool's rooms: what each may import of deploytool (besides itself and errors)
DEPLOYTOOL_ROOMS = {
    "config": set(),
    "connectors": {"config"},
    "ops": {"config", "connectors"},
    "views": set(),
}
ENTRY = {"commands", "tasks", "program", "usage", "__main__"}


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
    assert imports(where, source) == {"remote.host", "remote.job.pool", "deploytool.config"}
    view = REPO / "deploytool" / "views" / "probe.py"
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..ops import deploy\n"
    assert imports(view, source) == {"typing"}  # a type hint only
    assert imports(view, source + "from ..ops.control import call\n") >= {"deploytool.ops.control"}


def sizes() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(module, lines) over 400 and (function, lines) over 60, in remote/ and deploytool/."""
    modules, functions = [], []
    for path in files("remote") + files("deploytool"):
        src = path.read_text()
        if len(src.splitlines()) > 400:
            modules.append((rel(path), len(src.splitlines())))
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    functions.append((f"{rel(path)}:{node.name}", n))
    return modules, functions


def test_no_module_over_400_lines_and_no_function_over_60():
    modules, functions = sizes()
    assert modules == [] and functions == [], "split them: one room, one job each"
