"""Where the benchmarks find the repository, the trainer, their data and
results, and the voices they use."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
# The trainer's command line under this interpreter, as the dashboard spawns it.
TRAINER_CORE = [sys.executable, "-m", "trainer_core"]
# Generated data, scratch folders and results; VEGA_BENCH_DATA moves them (the
# tests use a temporary folder).
DATA = Path(os.environ.get("VEGA_BENCH_DATA") or BENCH / ".data")
RESULTS = DATA / "results"
# Text the espeak-ng voice corpus is read from: the bundled demo text (public domain novel).
CORPUS_TEXT = REPO / "trainer_core" / "demo" / "text" / "corpus"
DEMO_VOICE = REPO / "trainer_core" / "demo" / "voice"
# The 40-clip corpus the tests use: smoke runs and the benches that build big
# folders by linking its WAVs.
SMALL_VOICE = REPO / "tests" / "fixtures" / "voice"
FEATURE_CACHE = DATA / "cache"
