"""What a record holds as training rows, read back the simple way."""

from __future__ import annotations


def generated(rec: dict) -> list[dict]:
    """The replies the target model wrote: all of a turns: all record, the last of any other."""
    mine = [m for m in rec["conversations"] if m["role"] == "assistant"]
    return mine if "turns" in rec else mine[-1:]


def assistant_turns(rec: dict) -> list[int]:
    """Each generated reply's place among the record's assistant turns (the dataset's included)."""
    n = sum(m["role"] == "assistant" for m in rec["conversations"])
    return list(range(n)) if "turns" in rec else [n - 1]
