"""Helpers for the train scripts (pre-flight checks before Ray starts)."""
