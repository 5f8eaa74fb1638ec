"""invoke's entry point: `invoke deploy`, `invoke restart`, `invoke tail`, … from the repository root.

The tasks live in deploytool/collection.py (the `deploytool` console script runs the same collection);
invoke finds them through this module's `ns`, so that name must stay. No module of the package may be
named tasks.py: invoke looks for one from the folder it is typed in upward, and from deploytool/ it
would load that one instead of this.
"""

from deploytool import program, usage
from deploytool.collection import ns

__all__ = ["ns"]

usage.install()  # invoke's own parser: a mistyped task or flag is bad input (exit 2, did you mean)
program.end_quietly_on_closed_stdout()  # `invoke status | head -1`: exit 0, no traceback
