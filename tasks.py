"""invoke tasks for deploytool (the tasks live in deploytool/tasks.py; `deploytool` runs the same)."""
