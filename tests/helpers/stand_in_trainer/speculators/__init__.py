"""Stands in for the speculators package in the fast test tier (tests/helpers/stand_in_trainer)."""
