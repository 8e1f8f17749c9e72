"""Data for training: the folder scan (`scan`), and decoding, features, preloading and batching.

This package's `__init__` imports nothing so that `trainer_core.data.scan` stays light (no torch,
no librosa): the dashboard runs the scan through `trainer-core check-data`
and must get an answer fast.
"""
