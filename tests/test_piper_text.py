"""Piper's text front end on the espeak-ng library Vega ships, against Piper's own phonemizer.

Over a fixed 300-sentence set (tests/data/piper_frontend_sentences.tsv: en-us, es and ku, with
punctuation, numbers and abbreviations, single sentences and pairs) Vega's ids must equal those of
Piper's `EspeakPhonemizer.phonemize` + `phonemes_to_ids` for every es and ku sentence; the en-us
sentences that differ are exactly those listed in docs/piper-text.md, and only by the glide Piper's
later espeak-ng release writes. No sentence may differ in its clause marks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer_core.contract.profile_audio import TtsSection
from trainer_core.models.piper_phonemes import clause_mark
from trainer_core.models.vits.piper_text import piper_id_map
from trainer_core.models.vits.symbols import SymbolTable

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ROOT / "tests" / "data" / "piper_frontend_sentences.tsv"
DIFFERENCES = ROOT / "docs" / "piper-text.md"
MARKS = frozenset(".,?!:;")
GLIDE = "\u02b2"


def sentence_set() -> list[tuple[str, str]]:
    rows = [line.split("\t") for line in SENTENCES.read_text(encoding="utf-8").splitlines() if line]
    return [(language, text) for language, text in rows]


def listed_differences() -> list[str]:
    """The en-us sentences docs/piper-text.md lists, between its markers, one `- `...`` line each."""
    text = DIFFERENCES.read_text(encoding="utf-8")
    block = text.split("<!-- differences:start -->")[1].split("<!-- differences:end -->")[0]
    return [line[3:-1] for line in block.strip().splitlines()]


def tables(frontend_piper: bool = True) -> dict[str, SymbolTable]:
    made = {}
    for language in ("en-us", "es", "ku"):
        tts = TtsSection(text_units="phonemes", espeak_voice=language)
        table, _ = SymbolTable.build([], tts, 256)
        if not frontend_piper:
            state = table.state_dict() | {"frontend": ""}
            table = SymbolTable.from_state(state)
        made[language] = table
    return made


@pytest.fixture(scope="module")
def piper_ids() -> dict[tuple[str, str], tuple[list[list[int]], list[str]]]:
    """Piper's ids and phoneme strings per (language, sentence), from Piper's own code."""
    from piper.phoneme_ids import phonemes_to_ids
    from piper.phonemize_espeak import EspeakPhonemizer

    phonemizer = EspeakPhonemizer()
    found = {}
    for language, text in sentence_set():
        sentences = phonemizer.phonemize(language, text)
        found[language, text] = ([phonemes_to_ids(s) for s in sentences], ["".join(s) for s in sentences])
    return found


def test_the_set_is_300_sentences_in_three_languages() -> None:
    rows = sentence_set()
    assert len(rows) == 300 and len(set(rows)) == 300
    assert {language: sum(1 for lang, _ in rows if lang == language) for language in ("en-us", "es", "ku")} == {
        "en-us": 100,
        "es": 100,
        "ku": 100,
    }


def test_a_new_voice_starts_from_pipers_id_map() -> None:
    from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP

    assert piper_id_map() == {symbol: list(ids) for symbol, ids in DEFAULT_PHONEME_ID_MAP.items()}
    assert tables()["es"].id_map == piper_id_map()


def test_ids_equal_pipers_for_every_spanish_and_kurmanji_sentence_and_marks_everywhere(
    piper_ids: dict[tuple[str, str], tuple[list[list[int]], list[str]]],
) -> None:
    ours = tables()
    english_differences = []
    for (language, text), (theirs, their_phonemes) in piper_ids.items():
        table = ours[language]
        got = table.encode_sentences(text)
        mine = ["".join(table._sentences(text)[k]) for k in range(len(got))]
        # Clause marks and sentence splits: equal for all 300.
        assert [[c for c in s if c in MARKS] for s in mine] == [[c for c in s if c in MARKS] for s in their_phonemes]
        assert table.encode(text) == [i for ids in got for i in ids]  # joined, as Piper's trainer joins them
        if got == theirs:
            continue
        assert language == "en-us", f"{language} {text!r}: {mine} != {their_phonemes}"
        assert [s.replace(GLIDE, "") for s in their_phonemes] == mine, text  # only the later release's glide
        english_differences.append(text)
    assert english_differences == listed_differences()
    assert f"{len(english_differences)} of the 100 en-us sentences" in DIFFERENCES.read_text(encoding="utf-8")


def test_negative_control_the_front_end_without_clause_marks_differs(
    piper_ids: dict[tuple[str, str], tuple[list[list[int]], list[str]]],
) -> None:
    """The comparison has teeth: Vega's earlier front end (clauses joined, marks dropped) fails it."""
    legacy = tables(frontend_piper=False)
    differing = sum(legacy[lang].encode_sentences(text) != theirs for (lang, text), (theirs, _) in piper_ids.items())
    assert differing >= 290


@pytest.mark.parametrize(
    ("read", "last", "expected"),
    [
        ("Hello, w", False, (",", False)),
        ("Why?! N", False, ("?", True)),
        ("Well\u2026 m", False, ("", False)),
        ("Wait...", True, ("", False)),
        ('"Run!" she', False, ("!", True)),
        ("no mark at the end", True, ("", True)),
        ("fine.\u201d ", True, (".", True)),
    ],
)
def test_the_mark_that_ended_a_clause(read: str, last: bool, expected: tuple[str, bool]) -> None:
    assert clause_mark(read, last) == expected
