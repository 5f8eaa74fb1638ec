"""Hop counter: sys.setprofile 'call' events whose code lives in the product (deploytool/, remote/ of
the repository two folders above this file, or of a release deployed under
$HOPS_WORK/host/releases/<id>/, HOPS_WORK defaulting to /tmp/deploytool-hops). Used by laptop.py (the
laptop command), boot.py (`python -S -m remote --request` on the host) and site/sitecustomize.py (the
runner). Stdlib only.

Counted per event:
  calls    a plain function call, or the first entry of a generator/coroutine (one hop each)
  resumes  a generator/coroutine resumed after a yield/await (reported apart, not a hop)
  modules  a module body run at import (`<module>`, reported apart, not a hop)
"""

from __future__ import annotations

import collections
import dis
import json
import os
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + "/"
PRODUCT = (REPO + "deploytool/", REPO + "remote/")
WORK = os.path.abspath(os.environ.get("HOPS_WORK") or "/tmp/deploytool-hops")
RELEASES = WORK + "/host/releases/"
GEN_FLAGS = 0x20 | 0x80 | 0x200  # generator | coroutine | async generator

_product_cache: dict = {}
_first_resume: dict = {}


def product_name(code) -> str | None:
    """'remote/common/caps.py:Caps.target' for product code, else None (cached per code object)."""
    try:
        return _product_cache[code]
    except KeyError:
        pass
    fn = code.co_filename
    rel = None
    if fn.startswith(PRODUCT):
        rel = fn[len(REPO) :]
    elif fn.startswith(RELEASES):
        parts = fn[len(RELEASES) :].split("/", 1)  # <release id>, remote/...
        if len(parts) == 2 and parts[1].startswith(("remote/", "deploytool/")):
            rel = parts[1]
    name = None if rel is None else f"{rel}:{getattr(code, 'co_qualname', code.co_name)}"
    _product_cache[code] = name
    return name


def kind(frame) -> str:
    code = frame.f_code
    if code.co_name == "<module>":
        return "modules"
    if not code.co_flags & GEN_FLAGS:
        return "calls"
    first = _first_resume.get(code)
    if first is None:  # offset of the first RESUME: where a fresh generator/coroutine starts
        first = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
        _first_resume[code] = first
    return "calls" if frame.f_lasti <= first else "resumes"


COMPREHENSIONS = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"}
# a host command's polling loops: each turn reads status.json again until the runner answers
WAIT_LOOPS = {"recap", "_wait_running"}
NOT_WAIT = {"keep_caps", "send_control", "as_they_were", "start_detached"}


def waiting(frame) -> str | None:
    """'recap' / '_wait_running' when this call is made by (under) the polling part of
    runner_process.recap or runner_process._wait_running (not the call of the loop function
    itself, nor what it does before/after polling: keep_caps, send_control)."""
    f = frame.f_back
    while f is not None:
        name = f.f_code.co_name
        if name in NOT_WAIT:
            return None
        if name in WAIT_LOOPS and f.f_code.co_filename.endswith("processes/runner_process.py"):
            return name
        f = f.f_back
    return None


def importing(frame) -> bool:
    """A module body (other than __main__'s: the entry runs the whole command) is on the stack."""
    f = frame.f_back
    while f is not None:
        if f.f_code.co_name == "<module>" and f.f_globals.get("__name__") != "__main__":
            return True
        f = f.f_back
    return False


class Tally:
    def __init__(self, label: str):
        self.label = label
        self.n = collections.Counter()  # calls / resumes / modules
        self.funcs = collections.Counter()  # name -> calls
        self.t0 = None
        self.marks = []

    def mark(self, label: str) -> None:
        self.marks.append([label, self.n["calls"]])

    def add(self, frame, name: str) -> None:
        k = kind(frame)
        self.n[k] += 1
        if self.t0 is None:
            self.t0 = time.time()
        if k == "calls":
            self.funcs[name] += 1
            if frame.f_code.co_name in COMPREHENSIONS:
                self.n["comprehensions"] += 1
            w = waiting(frame)
            if w:
                self.n["wait_" + w] += 1
            if importing(frame):
                self.n["import_time"] += 1

    def merge(self, other: "Tally") -> None:
        self.n.update(other.n)
        self.funcs.update(other.funcs)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "calls": self.n["calls"],
            "comprehensions": self.n["comprehensions"],  # of calls: <genexpr>/<listcomp>/... bodies
            "import_time": self.n["import_time"],  # of calls: made while a module is imported
            "marks": self.marks,  # [label, calls so far] at each mark
            "wait": {k[5:]: v for k, v in self.n.items() if k.startswith("wait_")},  # of calls
            "distinct_functions": len(self.funcs),
            "resumes": self.n["resumes"],
            "module_bodies": self.n["modules"],
            "t_first": self.t0,
            "functions": dict(self.funcs.most_common()),
        }


def dump(path: str, **parts) -> None:
    out = {"pid": os.getpid(), "argv": sys.argv, "t_dump": time.time()}
    for key, value in parts.items():
        out[key] = value.to_dict() if isinstance(value, Tally) else value
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, path)


def simple(label: str, mark_on_return: str | None = None):
    """A whole-process counter: main thread and other threads apart. Returns (main, other). With
    `mark_on_return` (a product name): both tallies get a mark each time that function returns."""
    main, other = Tally(label), Tally(label + " (other threads)")

    def on_return(frame):
        if product_name(frame.f_code) == mark_on_return:
            main.mark(mark_on_return)
            other.mark(mark_on_return)

    def counting_into(tally: Tally):
        def prof(frame, event, arg):
            if event == "call":
                name = product_name(frame.f_code)
                if name is not None:
                    tally.add(frame, name)
            elif event == "return" and mark_on_return:
                on_return(frame)

        return prof

    threading.setprofile(counting_into(other))
    sys.setprofile(counting_into(main))
    return main, other
