"""Vega's trainer: profiles, the event protocol and the PyTorch training engine.

Importing this package is cheap on purpose: torch and librosa load only in
the modules that need them.
"""

__version__ = "0.1.0"
