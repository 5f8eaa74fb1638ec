"""invoke's entry point: `invoke deploy`, `invoke restart`, `invoke tail`, … from the repository root.

The tasks live in deploytool/tasks.py (the `deploytool` console script runs the same collection);
invoke finds them through this module's `ns`, so that name must stay.
"""

from deploytool import usage
from deploytool.tasks import ns

__all__ = ["ns"]

usage.install()  # invoke's own parser: a mistyped task or flag is bad input (exit 2, did you mean)
