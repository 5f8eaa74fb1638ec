"""What a host command's request is made of (standard library only): `Request`, whose dataclass
fields are its flags, each made by `opt`. protocol.py declares the requests themselves."""

from __future__ import annotations

import argparse
import json
import typing
from dataclasses import MISSING, field, fields
from typing import ClassVar


def opt(default, help: str, *, parse=None, show=str, metavar=None, json_arg=False, repeat=False):
    """A request's field: its one default, its help, how its flag's text is read and written;
    `repeat`: the flag may be given many times, the field holds a tuple of what each one parsed."""
    meta = dict(help=help, parse=parse, show=show, metavar=metavar, json=json_arg, repeat=repeat)
    if isinstance(default, (list, dict)):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


def _nonneg_float(text) -> float:
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if x < 0:
        raise ValueError(f"expected seconds, 0 or more, got {x:g}")
    return x


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default(f):
    return f.default_factory() if f.default_factory is not MISSING else f.default


class Request:
    """A host command's request: `command` is its place on the command line, `answer` names its
    answer's type (None: a process, not a JSON answer). Fields are its flags (see `opt`)."""

    command: ClassVar[tuple[str, ...]] = ()
    answer: ClassVar[str | None] = None  # a name in answers.py (imported only when asked for)
    help: ClassVar[str] = ""

    @classmethod
    def answer_type(cls) -> type:
        if cls.answer == "JobView":
            from .status import JobView

            return JobView
        from . import answers

        return getattr(answers, cls.answer)

    def argv(self) -> list[str]:
        """The command line: the command, then a flag for every value that is not the default."""
        out = list(self.command)
        for f in fields(self):
            v, meta = getattr(self, f.name), f.metadata
            if v == _default(f):
                continue
            if v is True:
                out.append(_flag(f.name))
            elif meta["json"]:
                out += [_flag(f.name), json.dumps(v)]
            elif meta["repeat"]:
                for item in v:
                    out += [_flag(f.name), meta["show"](item)]
            else:
                out += [_flag(f.name), meta["show"](v)]
        return out

    @classmethod
    def add_arguments(cls, p: argparse.ArgumentParser) -> None:
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            meta, tp = f.metadata, hints[f.name]
            # the dataclass holds the default, once
            kw: dict = {"help": meta["help"], "dest": f.name, "default": argparse.SUPPRESS}
            if tp is bool:
                kw["action"] = "store_true"
            else:
                kw.update(type=_friendly(_argtype(meta, tp)), metavar=meta["metavar"])
                if meta["repeat"]:
                    kw["action"] = "append"
            p.add_argument(_flag(f.name), **kw)

    @classmethod
    def from_args(cls, ns: argparse.Namespace):
        given = {f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})

    @classmethod
    def from_text(cls, **raw):
        """The request from the text of its flags as a user typed them (None: not given); ValueError
        names the flag. An empty text was typed (`--datasets ""`): its parser answers it."""
        hints, out = typing.get_type_hints(cls), {}
        for f in fields(cls):
            v = raw.pop(f.name, None)
            if v is None or v == ():
                continue
            conv = _argtype(f.metadata, hints[f.name])
            try:
                if hints[f.name] is bool:
                    out[f.name] = bool(v)
                elif f.metadata["repeat"]:
                    out[f.name] = tuple(conv(x) for x in v)
                else:
                    out[f.name] = conv(v)
            except (ValueError, argparse.ArgumentTypeError) as e:
                msg = str(e)
                raise ValueError(
                    msg if msg.startswith("--") else f"{_flag(f.name)}: {msg}"
                ) from None
        if raw:  # values the caller passed for no field: a bug of ours, named even under python -O
            raise TypeError(f"not flags of {cls.__name__}: {sorted(raw)}")
        return cls(**out)


def helps(cls: type[Request], *names: str) -> dict[str, str]:
    """These flags' help, by field name (the invoke tasks show the host's own words)."""
    found = {f.name: f.metadata["help"] for f in fields(cls)}
    return {n: found[n] for n in names}


def _friendly(conv):
    """argparse says "invalid _nonneg_float value"; this says what is wrong with it."""

    def parse(text):
        try:
            return conv(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _argtype(meta, tp):
    if meta["json"]:
        return json.loads
    if meta["parse"]:
        return meta["parse"]
    base = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
    return base[0]
