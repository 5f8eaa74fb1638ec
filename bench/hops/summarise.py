"""python summarise.py DIR: one row per process part found in DIR (laptop-*, request-*, runner-*),
in time order.
  calls  hops: product function calls + first entries of product generators/coroutines
  comp   of calls: comprehension / generator-expression bodies (<listcomp>, <genexpr>, ...)
  imp    of calls: made while a module body is imported (e.g. dataclass field helpers)
  wait   of calls: made by a host polling loop (runner_process.recap / _wait_running)
  dist   distinct product functions called
  resum  generator/coroutine resumes (not hops); mods: module bodies run (not hops)
  laptop `answered`: calls up to the return of the last control.call (the host's last answer)."""

import glob
import json
import os
import sys

COMP = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


def compof(v: dict) -> int:
    return sum(n for k, n in v["functions"].items() if k.endswith(COMP))


def main(d: str) -> None:
    rows = []
    for p in glob.glob(f"{d}/*.json"):
        with open(p) as f:
            j = json.load(f)
        for part in ("main", "other", "housekeeping", "tail"):
            v = j.get(part)
            if v and (v["calls"] or part == "main"):
                t = v["t_first"] or j["t_dump"]
                rows.append((t, os.path.basename(p), part, j.get("command"), v))
    rows.sort(key=lambda r: r[0])
    tot = comp = imp = wait = 0
    allf = set()
    print(
        f"{'file':28} {'part':12} {'command':14} {'calls':>6} {'comp':>5} {'imp':>4} {'wait':>5} "
        f"{'dist':>5} {'resum':>5} {'mods':>4} answered"
    )
    for _t, f, part, cmd, v in rows:
        w = sum(v.get("wait", {}).values())
        marks = v.get("marks") or []
        print(
            f"{f:28} {part:12} {' '.join(cmd or []):14} {v['calls']:6} {compof(v):5} "
            f"{v.get('import_time', 0):4} {w:5} {v['distinct_functions']:5} {v['resumes']:5} "
            f"{v['module_bodies']:4} {marks[-1][1] if marks else ''}"
        )
        if part in ("main", "other"):
            tot += v["calls"]
            comp += compof(v)
            imp += v.get("import_time", 0)
            wait += w
            allf |= set(v["functions"])
    print(
        f"journey (main+other parts): calls {tot}, of which comprehensions {comp}, "
        f"import-time {imp}, polling {wait}; distinct product functions {len(allf)}"
    )


if __name__ == "__main__":
    main(sys.argv[1])
