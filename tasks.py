"""invoke's entry point: `invoke deploy`, `invoke restart`, `invoke tail`, … from the repository root.

The tasks live in deploytool/collection.py (the `deploytool` console script runs the same collection);
invoke finds them through this module's `ns`, so that name must stay. No module of the package may be
named tasks.py: invoke looks for one from the folder it is typed in upward, and from deploytool/ it
would load that one instead of this.
"""

import sys

try:
    from deploytool import program, usage
    from deploytool.collection import ns
except KeyboardInterrupt:  # while the tasks load: invoke would end with 1 and not a word
    print("interrupted (Ctrl-C) before the command began: nothing was done", file=sys.stderr)
    raise SystemExit(130) from None

__all__ = ["ns"]

usage.install()  # invoke's own parser: a mistyped task or flag is bad input (exit 2, did you mean)
program.end_as_said()  # `invoke status | head -1`: exit 0, no traceback; Ctrl-C: 130, one line
