"""A mistyped command line is bad input: one line that says what was meant, and exit status 2.

invoke's parser answers `No idea what '--max-sample' is!` with status 1, and a flag value of the
wrong type (`--grace abc`) with a traceback. Both programs that run our tasks — invoke itself (from
the repository's tasks.py) and the `deploytool` console script — parse through
`Program.parse_tasks`; wrapping it turns those into the same one-line answer a config typo gets.

invoke's own `--config`/`-f` is a flag it cannot honour for us: it names invoke's settings file,
which invoke skips silently when missing, so `invoke status --config job2.yaml` would show the
project's job. It is refused with the line that reads that hosts.yaml.
"""

from __future__ import annotations

import re
import shlex

from invoke import Exit, Program
from invoke.exceptions import ParseError
from invoke.parser import ParseMachine

from remote.common.words import suggest

from .config.locate import CONFIG_ENV
from .errors import ExitCode

_UNKNOWN = re.compile(r"^No idea what '(.*)' is!$")
# invoke names the argument with its short flag and kind: `<Argument: grace (g) [float]>`
_NO_VALUE = re.compile(r"^Flag <Argument: (\w+)[^>]*> needed value")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def explain(e: Exception, binary: str, task_names) -> str:
    """The one line for a parse failure (without the `error: ` prefix)."""
    context = getattr(e, "context", None)
    task = context.name if context is not None else None
    message = str(e)
    unknown = _UNKNOWN.match(message)
    if unknown:
        token = unknown.group(1)
        if token.startswith("-") and task:
            flags = [f for f in context.flags if f.startswith("--")]
            return (
                f"{task} has no flag {token}{suggest(token, flags, quoted=False)}; "
                f"`{binary} {task} --help` lists them"
            )
        if token.startswith("-"):
            return f"no option {token}; `{binary} --help` lists them"
        names = [repr(n) for n in task_names]
        if task and not suggest(repr(token), names, quoted=False):
            return (
                f"{task} takes no argument {token!r} (a value goes after its flag); "
                f"`{binary} {task} --help` lists them"
            )
        return f"no task named {token!r}{suggest(repr(token), names, quoted=False)}; `{binary} --list` lists them"
    no_value = _NO_VALUE.match(message)
    if no_value:
        return _needs_value(binary, task, _flag(no_value.group(1)))
    return message


def _machine(tb) -> tuple[ParseMachine | None, object]:
    """The parser's state machine from a traceback (it knows which flag was being read), and the
    value it was given."""
    found, value = None, None
    while tb is not None:
        local = tb.tb_frame.f_locals
        if isinstance(local.get("self"), ParseMachine):
            found, value = local["self"], local.get("value", value)
        tb = tb.tb_next
    return found, value


def _bad_value(e: ValueError) -> str:
    machine, value = _machine(e.__traceback__)
    if machine is None or machine.flag is None:
        raise e
    task = machine.context.name if machine.context is not None else None
    kind = {int: "a whole number", float: "a number"}.get(machine.flag.kind, "another value")
    where = f"{task} " if task else ""
    return f"{where}{_flag(machine.flag.name)}: expected {kind}, got {value!r}"


def _contexts(collection) -> list:
    """The tasks' parser contexts, their help left in place: invoke's to_contexts consumes each
    task's help dict, and invoke builds them again to parse (`--help` would then show none)."""
    tasks = [collection[name] for name in collection.task_names]
    kept = [(t, dict(t.help)) for t in tasks]
    try:
        return collection.to_contexts(ignore_unknown_help=True)
    finally:
        for t, help_ in kept:
            t.help = help_


def _misread_flag(program: Program, binary: str) -> str | None:
    """The line for a flag invoke would misread, else None: a task's long flag typed with one dash
    (`-max-samples`), a flag given many times (`--cap`) with no value, or a flag of one value given
    twice.

    invoke reads the first as a cluster of one-letter flags (`-m -a -x …`), so its failure names
    only a letter (`restart has no flag -m`), or `--`, or none at all: `-cap`'s `-c` is its own
    --collection; the second it drops without a word; the third's second value it calls an argument
    the task does not take. The words are looked at before it parses them, with the task each
    belongs to.
    """
    if program.collection is None:
        return None
    contexts = {}
    for context in _contexts(program.collection):
        for name in (context.name, *context.aliases):
            contexts[name] = context
    context, a_value, listed, seen = None, False, None, []
    for word in program.core.unparsed:
        if word == "--":
            return None
        if listed and (word in contexts or word.partition("=")[0] in context.flags):
            # a flag given many times (`--cap`) takes no next flag for its value, where invoke
            # then drops it silently: the command would run as if it were not typed
            return _needs_value(binary, context.name, listed)
        listed = None
        if a_value:  # `--grace -50`: the flag's value, whatever it begins with
            a_value = False
            continue
        if word in contexts:
            context, seen = contexts[word], []
            continue
        if context is None or not word.startswith("-"):
            continue
        name = word.partition("=")[0]
        if name in context.flags:  # `in` and `[]`, not `.get`: they see `-H` for --host too
            flag = context.flags[name]
            if flag.takes_value and flag.kind is not list and any(f is flag for f in seen):
                return f"{context.name} {name}: given twice (it takes one value)"
            seen.append(flag)
            a_value = flag.takes_value and "=" not in word
            listed = name if a_value and flag.kind is list else None
            continue
        short = word[:2]
        if (
            len(word) <= 2
            or word.startswith("--")
            or (short in context.flags and context.flags[short].takes_value)
        ):
            continue  # `-Hgpu1` is -H with its value, as invoke reads it
        flags = [f for f in context.flags if f.startswith("--")]
        return (
            f"{context.name} has no flag {name}{suggest('-' + name, flags, quoted=False)}; "
            f"`{binary} {context.name} --help` lists them"
        )
    return _needs_value(binary, context.name, listed) if listed else None


def _needs_value(binary: str, task: str | None, flag: str) -> str:
    if not task:
        return f"{flag}: needs a value"
    return f"{task} {flag}: needs a value; `{binary} {task} --help` says what it takes"


def parse_tasks(program: Program, parse) -> None:
    """Run invoke's task parsing; a failure is an Exit with the one line and status 2."""
    binary = program.called_as or program.binary or "invoke"
    misread = _misread_flag(program, binary)
    if misread:
        raise Exit(f"error: {misread}", ExitCode.BAD_INPUT)
    try:
        parse()
    except ParseError as e:
        names = program.collection.task_names if program.collection else {}
        line = explain(e, binary, [*names, *(a for al in names.values() for a in al)])
        raise Exit(f"error: {line}", ExitCode.BAD_INPUT) from None
    except ValueError as e:
        raise Exit(f"error: {_bad_value(e)}", ExitCode.BAD_INPUT) from None


def _without_config(argv: list[str]) -> list[str]:
    """The command line less invoke's --config and its value (`--config X`, `--config=X`, `-f X`,
    `-fX`)."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--config", "-f"):
            skip = True
        elif not word.startswith(("--config=", "-f")):
            out.append(word)
    return out


def refuse_invoke_config(program: Program) -> None:
    """invoke's --config (its settings file) given: Exit 2 with the command that reads it as
    hosts.yaml."""
    path = program.args.config.value
    if not path:
        return
    binary = program.called_as or program.binary or "invoke"
    rest = shlex.join(_without_config(program.argv[1:]))
    raise Exit(
        f"error: --config is invoke's settings file, not hosts.yaml: type "
        f"`{CONFIG_ENV}={shlex.quote(path)} {binary} {rest}`",
        ExitCode.BAD_INPUT,
    )


def install(program_class: type[Program] = Program) -> None:
    """Make `program_class` (invoke's own, by default) answer a mistyped command line this way."""
    original = program_class.parse_tasks
    if getattr(original, "answers_bad_input", False):
        return

    def wrapped(self):
        parse_tasks(self, lambda: original(self))
        refuse_invoke_config(self)

    wrapped.answers_bad_input = True
    program_class.parse_tasks = wrapped
