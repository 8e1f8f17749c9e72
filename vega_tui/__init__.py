"""Vega's terminal dashboard. Never imports torch, librosa or matplotlib (see
tests/test_import_hygiene.py)."""

__version__ = "0.1.0"
