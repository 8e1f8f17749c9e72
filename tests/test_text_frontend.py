"""Phonemes with no system package: espeak-ng's library from the espeakng-loader wheel, and the binary fallback.

`test_espeak_less.py` runs this file again in a subprocess whose PATH holds no espeak-ng program, with
VEGA_TEST_NO_ESPEAK_BINARY=1: there the binary tests skip and the first test checks the binary really is gone.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trainer_core.models.espeak_library import load_espeak_library
from trainer_core.models.text_frontend import (
    EspeakError,
    TextEncoder,
    espeak_backend,
    phonemize,
    resolve_units,
)

DEMO_METADATA = Path(__file__).parent / "fixtures" / "voice" / "metadata.csv"
BINARY_HIDDEN = os.environ.get("VEGA_TEST_NO_ESPEAK_BINARY") == "1"
needs_binary = pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="the espeak-ng program is not installed (apt install espeak-ng)"
)
EXTRA_SENTENCES = [
    "Dr. Smith paid $42.50 on 3 May 2024, didn't he?",
    "Wait... what?! No; it's (almost) 10:30 — really.",
    "The quick brown fox jumps over the lazy dog.",
]


def demo_transcripts() -> list[str]:
    with DEMO_METADATA.open(encoding="utf-8", newline="") as f:
        return [row[1] for row in csv.reader(f, delimiter="|") if len(row) > 1]


def test_the_binary_is_hidden_when_the_suite_says_so() -> None:
    """Guards the espeak-less run: if PATH still reached a binary there, it would prove nothing."""
    if BINARY_HIDDEN:
        assert shutil.which("espeak-ng") is None
    assert espeak_backend("auto") == "library", "the wheel's library is the default backend on every machine"


def test_the_library_phonemizes_every_demo_transcript() -> None:
    texts = demo_transcripts()
    assert len(texts) >= 40
    for text in texts:
        ipa = phonemize(text, "en-us", "library")
        assert ipa and "ˈ" in ipa, (text, ipa)
    assert phonemize("The sun is warm today.", "en-us", "library") == "ðə sˈʌn ɪz wˈɔːɹm tədˈeɪ"
    assert load_espeak_library().version.startswith("1.")


def test_auto_units_are_phonemes_and_the_encoder_records_its_backend() -> None:
    assert resolve_units("auto") == "phonemes"
    encoder = TextEncoder.build(["Hello world."], units="auto")
    state = encoder.state_dict()
    assert (encoder.units, state["espeak_backend"]) == ("phonemes", "library")
    assert state["espeak_version"] == load_espeak_library().version
    again = TextEncoder.from_state(state)
    assert again.encode("Hello world.") == encoder.encode("Hello world.") and again.backend == "library"
    older = {k: v for k, v in state.items() if k not in ("espeak_backend", "espeak_version")}
    assert TextEncoder.from_state(older).encode("Hello world.") == encoder.encode("Hello world.")


def test_an_unknown_voice_is_a_clear_error_from_the_library() -> None:
    with pytest.raises(EspeakError, match=r"tts.espeak_voice.*qqq|qqq.*tts.espeak_voice"):
        TextEncoder.build(["hello"], units="phonemes", espeak_voice="qqq", espeak_backend_choice="library")


def test_text_that_looks_like_an_option_is_spoken_by_the_library() -> None:
    encoder = TextEncoder.build(["-v de", "--help"], units="phonemes", espeak_backend_choice="library")
    assert encoder.encode("-v de") and encoder.encode("--help")


def test_parallel_callers_with_two_voices_get_what_serial_calls_get() -> None:
    texts = demo_transcripts()[:12]
    serial = {(t, v): phonemize(t, v, "library") for t in texts for v in ("en-us", "de")}
    found: dict[tuple[str, str], str] = {}

    def work(voice: str) -> None:
        for text in texts:
            found[(text, voice)] = phonemize(text, voice, "library")

    threads = [threading.Thread(target=work, args=(v,)) for v in ("en-us", "de", "en-us", "de")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == serial


def without_stress(ipa: str) -> str:
    return ipa.replace("ˈ", "").replace("ˌ", "")


@needs_binary
def test_binary_and_library_give_the_same_phonemes_from_the_same_voice_data() -> None:
    """The fallback is the same front end: the binary pointed at the wheel's data matches the library.

    Every demo transcript is identical. On 500 sentences of the bundled book, 478 were identical and 22
    differed only in primary/secondary stress of a word next to "?!" or "..." (the program reads stress
    after synthesis, the library before), never in a phone; the last sentence below is one of those.
    """
    data = load_espeak_library().data_path
    for text in demo_transcripts():
        for voice in ("en-us", "en-gb"):
            assert phonemize(text, voice, "binary", data_path=data) == phonemize(text, voice, "library"), text
    for text in EXTRA_SENTENCES:
        binary, library = phonemize(text, "en-us", "binary", data_path=data), phonemize(text, "en-us", "library")
        assert without_stress(binary) == without_stress(library), text


@needs_binary
def test_the_binary_backend_is_chosen_when_asked_and_phonemizes() -> None:
    encoder = TextEncoder.build(["Hello world.", "-v de"], units="phonemes", espeak_backend_choice="binary")
    assert encoder.backend == "binary" and encoder.state_dict()["espeak_backend"] == "binary"
    assert "ˈ" in encoder.decode(encoder.encode("Hello world."))
    assert encoder.encode("-v de"), "text that looks like an option goes to stdin and is spoken, not parsed"


def test_binary_asked_for_but_missing_names_both_ways_to_get_phonemes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EspeakError, match="apt install espeak-ng.*pip install espeakng-loader"):
        TextEncoder.build(["hello"], units="phonemes", espeak_backend_choice="binary")


def test_with_neither_backend_auto_is_characters_and_phonemes_say_what_to_install(tmp_path: Path) -> None:
    """A real interpreter where `espeakng_loader` cannot be imported and PATH has no espeak-ng."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _NoLoader:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'espeakng_loader':\n"
        "            raise ImportError('hidden by the test')\n"
        "sys.meta_path.insert(0, _NoLoader())\n"
    )
    code = (
        "from trainer_core.models.text_frontend import TextEncoder, EspeakError\n"
        "assert TextEncoder.build(['hello'], units='auto').units == 'chars'\n"
        "try:\n"
        "    TextEncoder.build(['hello'], units='phonemes')\n"
        "except EspeakError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PATH": "/nonexistent", "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pip install espeakng-loader" in done.stdout and "apt install espeak-ng" in done.stdout
    assert "tts.text_units" in done.stdout


def test_the_library_speaks_audible_audio_that_grows_with_the_text() -> None:
    """Benchmarks make their voice corpora this way, so they need no apt package either."""
    import numpy as np

    library = load_espeak_library()
    short = np.frombuffer(library.speak("Hi.", "en-us", 160), dtype=np.int16)
    long = np.frombuffer(
        library.speak("This sentence is a good deal longer than the first one.", "en-gb", 160), dtype=np.int16
    )
    assert library.sample_rate == 22050
    assert 0 < len(short) < len(long) and np.sqrt(np.mean((long / 32768.0) ** 2)) > 0.01
    assert phonemize("Hi.", "en-us", "library") == "hˈaɪ", "speaking leaves the phonemizer's state alone"
