"""Shared foundations: the release lock, verified fetching, atomic writes, the sanitizer, the fingerprint."""

__version__ = "0.1.0"
