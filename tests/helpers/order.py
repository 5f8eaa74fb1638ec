"""The order the everyday tier's tests are handed to xdist's workers in (`--dist worksteal` splits the
list into one contiguous share per worker, then an idle worker takes half of the longest queue
left): each share gets its part of the end-to-end tests (tests/test_*.py: processes, sshd, servers)
and of the quick unit tests, the long ones marked `slow` first of all, so no worker starts with only
the heavy ones and the run does not end waiting on one long test started late."""

from __future__ import annotations


def dealt(items: list, workers: int) -> list:
    end_to_end = [i for i in items if i.path.parent.name == "tests"]
    unit = [i for i in items if i.path.parent.name != "tests"]
    end_to_end.sort(key=lambda i: i.get_closest_marker("slow") is None)  # stable: slow first
    shares = [[] for _ in range(workers)]
    for n, item in enumerate(end_to_end):
        shares[n % workers].append(item)
    for n, item in enumerate(unit):
        shares[(n + len(end_to_end)) % workers].append(item)  # every share the same length, ±1
    return [item for share in shares for item in share]
