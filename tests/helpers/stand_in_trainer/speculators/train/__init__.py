"""Stands in for speculators.train: `python -m speculators.train` runs __main__.py here."""
