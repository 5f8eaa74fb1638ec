"""invoke tasks for deploytool (the tasks live in deploytool/tasks.py; `deploytool` runs the same)."""

from deploytool.tasks import ns  # noqa: F401
