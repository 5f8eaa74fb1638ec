"""How many places declare each host-command option, and how many string-keyed dict reads the local
side makes (#23's before/after figures). Run from the repository root: `python bench/contract_counts.py`.

An option is "declared" where its name or default is written: an argparse `add_argument("--x")`, a
parameter with a default, a class field with a default, or a call passing it a literal (`grace=30.0`).
A dict read is `x["key"]` or `x.get("key")` in deploytool/ outside the modules that read hosts.yaml or
record files (config, validate, export, formats): what is left reads host answers.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OPTIONS = [
    "max_samples",
    "cap",
    "max_tokens",
    "datasets",
    "grace",
    "force",
    "hard",
    "drain",
    "drain_timeout",
    "dry_run",
    "force_gpu",
    "wait",
    "recover",
    "gpu_wait",
    "tokens_per_dataset",
    "have",
    "spec",
    "root",
    "job",
]
NOT_ANSWERS = ("config", "validate", "export", "formats")


def sources(*where: str):
    for w in where:
        p = REPO / w
        yield from ([p] if p.suffix == ".py" else sorted(p.rglob("*.py")))


def declarations(where: dict | None = None) -> Counter:
    found: Counter = Counter()

    def add(name: str, path: Path, line: int) -> None:
        found[name] += 1
        if where is not None:
            where.setdefault(name, []).append(f"{path.relative_to(REPO)}:{line}")

    for path in sources("tasks.py", "deploytool", "remote"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Attribute) and f.attr == "add_argument" and node.args:
                    a = node.args[0]
                    if isinstance(a, ast.Constant) and str(a.value).startswith("--"):
                        add(str(a.value)[2:].replace("-", "_"), path, node.lineno)
                for kw in node.keywords:
                    if kw.arg in OPTIONS and isinstance(kw.value, ast.Constant):
                        if kw.value.value is not None and not isinstance(kw.value.value, bool):
                            add(kw.arg, path, node.lineno)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults))
                defaults += node.args.defaults + node.args.kw_defaults
                for arg, d in zip(args, defaults):
                    if d is not None and arg.arg in OPTIONS:
                        add(arg.arg, path, node.lineno)
            elif isinstance(node, ast.ClassDef):
                for st in node.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        if st.target.id in OPTIONS and st.value is not None:
                            add(st.target.id, path, st.lineno)
    return found


NUMERIC = {
    "grace": 30.0,
    "drain_timeout": 3600.0,
    "wait": 300.0,
    "gpu_wait": 120.0,
    "est_tokens": 2000,
}
CONSTANTS = {"GRACE_S": "grace", "DRAIN_TIMEOUT_S": "drain_timeout", "START_WAIT_S": "wait",
             "GPU_WAIT_S": "gpu_wait"}  # fmt: skip


def literal_defaults() -> Counter:
    """Where an option's default value itself is written (grace=30.0, default=3600.0, a constant
    GRACE_S = 30.0): what has to change, in how many places, to change the default."""
    found: Counter = Counter()

    def lit(node, name) -> bool:
        if isinstance(node, ast.Call) and node.args:  # opt(30.0, ...)
            node = node.args[0]
        return isinstance(node, ast.Constant) and node.value == NUMERIC.get(name, object())

    for path in sources("tasks.py", "deploytool", "remote"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults))
                defaults += node.args.defaults + node.args.kw_defaults
                found.update(
                    a.arg for a, d in zip(args, defaults) if d is not None and lit(d, a.arg)
                )
            elif isinstance(node, ast.Call):
                found.update(
                    k.arg for k in node.keywords if k.arg in NUMERIC and lit(k.value, k.arg)
                )
                f = node.func
                if isinstance(f, ast.Attribute) and f.attr == "get" and len(node.args) == 2:
                    key = getattr(node.args[0], "value", None)  # d.get("est_tokens", 2000)
                    if isinstance(key, str) and lit(node.args[1], key):
                        found[key] += 1
                if isinstance(f, ast.Attribute) and f.attr == "add_argument" and node.args:
                    name = str(getattr(node.args[0], "value", ""))[2:].replace("-", "_")
                    for k in node.keywords:
                        if k.arg == "default" and lit(k.value, name):
                            found[name] += 1
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None and lit(node.value, node.target.id):
                    found[node.target.id] += 1
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                t = node.targets[0]
                if (
                    isinstance(t, ast.Name)
                    and t.id in CONSTANTS
                    and lit(node.value, CONSTANTS[t.id])
                ):
                    found[CONSTANTS[t.id]] += 1
    return found


def dict_reads() -> Counter:
    found: Counter = Counter()
    for path in sources("deploytool"):
        rel = path.relative_to(REPO / "deploytool")
        if path.stem.startswith(NOT_ANSWERS) or rel.parts[0] == "config":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                key = node.args[0].value
            if isinstance(key, str) and not (
                isinstance(node, ast.Call) and "environ" in ast.unparse(node.func)
            ):
                found[str(path.relative_to(REPO))] += 1
    return found


def main() -> int:
    where: dict = {}
    decl = declarations(where)
    print("option declarations (name: places)")
    for name in OPTIONS:
        print(f"  {name:20} {decl.get(name, 0)}")
    print(f"  {'(all)':20} {sum(decl[n] for n in OPTIONS)}")
    if "--where" in sys.argv:
        for name in OPTIONS:
            print(f"  {name}: {', '.join(where.get(name, []))}")
    lits = literal_defaults()
    print("default values written (name=value: places)")
    for name, value in NUMERIC.items():
        print(f"  {name}={value:g}{'':10} {lits.get(name, 0)}")
    reads = dict_reads()
    print(f"string-keyed dict reads on the local side: {sum(reads.values())}")
    for path, n in reads.most_common():
        print(f"  {path:40} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
