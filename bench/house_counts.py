"""How the host side is built, counted with the AST so it can be rerun on any commit:

- string-keyed reads of the host's process state: `rec[...]` / `rec.get(...)` (a pid file's record),
  `want[...]` / `want.get(...)` (supervise.json), `spec.get(...)` (the server's settings as a dict);
- import circles among the modules of remote/ and deploytool/, imports inside functions included;
- places that replace a file by hand (os.replace / os.rename) outside the one atomic write;
- the largest modules.

    python bench/house_counts.py [REPO_DIR]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

KEYED = {"rec", "want", "spec", "last", "holder"}


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for where in ("remote", "deploytool"):
        for p in sorted((root / where).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def file_imports(root: Path, path: Path, source: str | None = None) -> set[str]:
    """Every module a file imports (relative imports made absolute), whatever the nesting, and for
    `from X import a` also X.a; a name imported for a type hint only (`if TYPE_CHECKING:`) is no
    import."""
    package = list(path.relative_to(root).with_suffix("").parts)[:-1]
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
            # `from ..facts import kill` imports a module too: each name may be one (a name that is
            # not a module matches none, so it adds nothing to a graph of modules)
            found |= {f"{mod}.{a.name}" for a in node.names}
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other round (Tarjan's strongly connected parts);
    tests/test_layering.py holds the tree to none."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def keyed_reads(path: Path) -> int:
    n = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            if node.value.id in KEYED and isinstance(node.slice, ast.Constant):
                n += isinstance(node.slice.value, str)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "get" and isinstance(f.value, ast.Name) and f.value.id in KEYED:
                n += bool(node.args) and isinstance(node.args[0], ast.Constant)
    return n


def replaces(path: Path) -> int:
    n = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if (
                isinstance(f.value, ast.Name)
                and f.value.id == "os"
                and f.attr in ("replace", "rename")
            ):
                n += 1
    return n


def unit_tested(root: Path, mods: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(modules a file under tests/unit/ imports, modules with a test at the mirrored path:
    remote/job/engine/pool.py <- tests/unit/remote/job/engine/test_pool.py)."""
    imported, mirrored = set(), set()
    for t in (root / "tests" / "unit").rglob("test_*.py"):
        imported |= {m for m in file_imports(root, t) if m in mods}
        under = t.parent.relative_to(root / "tests" / "unit")
        name = ".".join([*under.parts, t.stem[len("test_") :]])
        if name in mods:
            mirrored.add(name)
    return imported, mirrored


def main(root: Path) -> None:
    mods = modules(root)
    graph = {m: {i for i in file_imports(root, p) if i in mods and i != m} for m, p in mods.items()}
    host = {
        m: p
        for m, p in mods.items()
        if m.startswith(("remote.host", "remote.job", "remote.queries"))
    }
    print(
        "string-keyed reads of process state in remote/host, remote/job, remote/queries: "
        f"{sum(keyed_reads(p) for p in host.values())}"
    )
    found = circles(graph)
    print(f"import circles: {len(found)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    by_hand = {m: replaces(p) for m, p in mods.items() if replaces(p)}
    print(f"os.replace/os.rename call sites: {sum(by_hand.values())} in {sorted(by_hand)}")
    sizes = sorted(((len(p.read_text().splitlines()), m) for m, p in mods.items()), reverse=True)
    print("largest modules: " + ", ".join(f"{m} ({n})" for n, m in sizes[:3]))
    folders: dict[str, int] = {}
    for p in mods.values():
        if p.stem != "__init__":
            folders[str(p.parent.relative_to(root))] = (
                folders.get(str(p.parent.relative_to(root)), 0) + 1
            )
    big = sorted(((n, f) for f, n in folders.items()), reverse=True)[:3]
    print("largest folders: " + ", ".join(f"{f} ({n})" for n, f in big))
    ours = {m for m, p in host.items() if p.stem != "__init__"}
    imported, mirrored = unit_tested(root, mods)
    print(
        f"modules of remote/host, remote/job, remote/queries: {len(ours)}; imported by a unit test: "
        f"{len(ours & imported)}; with a unit test at the mirrored path: {len(ours & mirrored)}"
    )
    untested = sorted(ours - imported)
    print("  no unit test: " + (", ".join(untested) or "none"))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent))
