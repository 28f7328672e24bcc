"""Errors raised by the merge tool; the CLI prints them without a traceback."""

from __future__ import annotations


class MergeError(Exception):
    """Bad input or an unsupported checkpoint; the message names the offending path, key or value."""


class VerificationError(MergeError):
    """The merged model does not reproduce the checkpoint's logits within tolerance."""
