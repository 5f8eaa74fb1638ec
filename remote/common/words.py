"""A word mistyped, and the one meant: the "did you mean" of every refusal (flags, keys, values,
dataset names). Standard library only: the host and the local side both say it."""

from __future__ import annotations


def suggest(word: str, choices, quoted: bool = True) -> str:
    """` (did you mean 'B2'?)` where one of `choices` is close to `word` (the same but for case
    first: `b2` for `B2`); "" where none is."""
    import difflib  # only for a word mistyped: the host imports this module for its dataclasses

    same = [c for c in choices if str(c).lower() == str(word).lower()]
    close = same or difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    if not close:
        return ""
    return f" (did you mean {close[0]!r}?)" if quoted else f" (did you mean {close[0]}?)"
