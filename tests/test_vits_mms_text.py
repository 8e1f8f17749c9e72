"""An MMS voice's own text front end: Vega's ids for a fixed sentence set equal transformers' VitsTokenizer's,
for tokenizer files shaped as MMS ships them (Kurmanji's Latin letters; blanks on and off; a romanising voice),
the files Vega writes for an export load in VitsTokenizer with the same ids, and what the vocabulary lacks is
dropped and counted (check-data, the plan)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from transformers import VitsTokenizer

from conftest import REPO, TEST_VOICE
from trainer_core.cli import main
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.init_sources import VoiceStart
from trainer_core.contract.mms_tokenizer import read_tokenizer_folder
from trainer_core.contract.profile_loader import find_profile, load_profile
from trainer_core.data.scan import scan_data
from trainer_core.models.vits.hf_tokenizer_files import TokenizerNotRepresentable, write_tokenizer_files
from trainer_core.models.vits.mms_symbols import romanizer
from trainer_core.models.vits.start_symbols import plan_voice_start
from trainer_core.models.vits.symbols import SymbolTable, mms_id_map
from trainer_core.tiny_profiles import tiny_profile

SENTENCES: list[str] = json.loads((REPO / "tests" / "fixtures" / "mms_sentences.json").read_text("utf-8"))["sentences"]
# Kurmanji's Latin letters, space, apostrophe and hyphen in an MMS-like order: id 0 (the blank) is a letter.
KMR = ["w", "î", "d", "-", "b", "'", "z", "ç", "r", "a", "t", "x", "m", "ê", "v", "e", " ", "p", "u", "s", "f",
       "n", "h", "ş", "k", "j", "o", "i", "y", "l", "q", "c", "û", "g"]  # fmt: skip
# A romanising voice's vocabulary: plain Latin letters (its text is romanised before lookup).
ROMAN = list("qwertyuiopasdfghjklzxcvbnm '-")


def write_voice(folder: Path, symbols: list[str], **settings: Any) -> Path:
    """vocab.json, tokenizer_config.json and special_tokens_map.json as an MMS voice on the hub holds them."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {symbol: index for index, symbol in enumerate(symbols)}
    config = {"add_blank": True, "is_uroman": False, "language": "kmr", "normalize": True, "phonemize": False,
              "pad_token": symbols[0], "unk_token": "<unk>", "tokenizer_class": "VitsTokenizer"}  # fmt: skip
    config.update(settings)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    specials = {"pad_token": config["pad_token"], "unk_token": config["unk_token"]}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials, ensure_ascii=False), encoding="utf-8")
    return folder


def vega_table(folder: Path) -> SymbolTable:
    """The voice's table as a run keeps it: built from the folder, then rebuilt from its JSON state."""
    table, added = SymbolTable.build([], None, 0, mms=read_tokenizer_folder(folder))
    assert added == []
    return SymbolTable.from_state(json.loads(json.dumps(table.state_dict())))


def reference_ids(folder: Path, texts: list[str]) -> list[list[int]]:
    tokenizer = VitsTokenizer.from_pretrained(folder)
    return [list(tokenizer(text).input_ids) for text in texts]


@pytest.mark.parametrize(
    ("symbols", "settings"),
    [
        (KMR, {}),
        (KMR, {"add_blank": False}),
        (KMR, {"normalize": False}),  # nothing dropped: characters outside the vocabulary become <unk>
        (KMR + ["Q", "ke"], {}),  # an upper-case symbol stays upper case; a two-character entry
        (KMR, {"pad_token": "<pad>", "language": "ron"}),  # the blank's token outside the vocabulary
    ],
    ids=["blanks", "no-blanks", "not-normalised", "upper-case-entry", "pad-outside-ron"],
)
def test_ids_equal_vits_tokenizers_over_the_sentence_set(
    symbols: list[str], settings: dict[str, Any], tmp_path: Path
) -> None:
    folder = write_voice(tmp_path / "voice", symbols, **settings)
    table = vega_table(folder)
    ours = [table.encode(text) for text in SENTENCES]
    assert ours == reference_ids(folder, SENTENCES)
    assert len(SENTENCES) >= 40 and sum(bool(ids) for ids in ours) >= 40  # most sentences say something
    if settings.get("normalize", True):
        assert [] in ours and table.missing["п"] == 1 and table.missing["4"] == 3  # dropped, and counted
        if not settings:
            assert table.missing == expected_drops(SENTENCES)
        assert table.encode("İ") == table.encode("i\u0307")  # lowercasing may give two characters
    else:
        unk = table.mms.unk_id  # type: ignore[union-attr]
        assert unk == len(symbols) and table.num_symbols == unk + 1 and unk in ours[1]  # '?' is unknown


def test_a_romanising_voice_speaks_romanised_text_as_vits_tokenizer_does(tmp_path: Path) -> None:
    folder = write_voice(tmp_path / "rus", ROMAN, is_uroman=True, language="rus")
    table = vega_table(folder)
    others = [text for text in SENTENCES if not text.isascii()]
    # transformers' own path (it romanises when uroman is installed), once over all of them
    joined = " ".join(others)
    assert table.encode(joined) == reference_ids(folder, [joined])[0]
    # each sentence: our ids equal VitsTokenizer's on the text romanised the same way
    plain = write_voice(tmp_path / "plain", ROMAN, language="rus")
    romaniser = romanizer(table.mms)  # type: ignore[arg-type]  # uroman's, built once per process
    romanised = [romaniser.romanize_string(text.lower()) for text in SENTENCES]
    ours = [table.encode(text) for text in SENTENCES]
    assert ours == reference_ids(plain, romanised)
    assert ours[SENTENCES.index("नमस्ते दुनिया")] != []  # Devanagari speaks, romanised


def test_a_missing_uroman_is_a_clear_error_naming_the_voice_and_the_setting(tmp_path: Path) -> None:
    folder = write_voice(tmp_path / "rus", ROMAN, is_uroman=True, language="rus")
    code = "import sys; sys.modules['uroman'] = None; from trainer_core.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["check-data", str(TEST_VOICE), "--tokenizer", str(folder), "--no-cache"]
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"voice {folder}: its tokenizer_config.json sets is_uroman = true" in done.stderr
    assert "pip install 'vega[hf]'" in done.stderr


def test_written_tokenizer_files_load_in_vits_tokenizer_with_the_same_ids(tmp_path: Path) -> None:
    for name, symbols, settings in [
        ("kmr", KMR, {}),
        ("added", KMR, {"normalize": False, "pad_token": "<pad>"}),  # two added tokens past the vocabulary
        ("rus", ROMAN, {"is_uroman": True, "language": "rus", "add_blank": False}),
    ]:
        table = vega_table(write_voice(tmp_path / name, symbols, **settings))
        out = tmp_path / "export" / name
        written = write_tokenizer_files(table, out)
        assert sorted(p.name for p in written) == ["special_tokens_map.json", "tokenizer_config.json", "vocab.json"]
        assert read_tokenizer_folder(out, table.mms.name) == table.mms  # type: ignore[union-attr]
        texts = SENTENCES if name != "rus" else [text for text in SENTENCES if text.isascii()]
        assert reference_ids(out, texts) == [table.encode(text) for text in texts]
    # A folder transformers saved itself (added_tokens_decoder in its config) reads as the same tokenizer.
    for name in ("kmr", "added"):
        resaved = tmp_path / "resaved" / name
        VitsTokenizer.from_pretrained(tmp_path / name).save_pretrained(resaved)
        assert "added_tokens_decoder" in json.loads((resaved / "tokenizer_config.json").read_text("utf-8"))
        assert read_tokenizer_folder(resaved, name) == read_tokenizer_folder(tmp_path / name, name)
    config = json.loads((tmp_path / "export" / "rus" / "tokenizer_config.json").read_text("utf-8"))
    assert config["is_uroman"] is True and config["add_blank"] is False and config["phonemize"] is False
    # A Piper-framed voice (^ ... $) is not something VitsTokenizer makes: refused with the reason.
    tts = load_profile(find_profile("vits-small"), ["tts.text_units=chars"]).tts
    piper, _ = SymbolTable.build(["ab"], tts, 8)
    with pytest.raises(TokenizerNotRepresentable, match=r"frames its ids as Piper does .*only puts blanks"):
        write_tokenizer_files(piper, tmp_path / "piper")


def test_a_changed_vocabulary_gives_other_ids_so_the_comparison_can_fail(tmp_path: Path) -> None:
    table = vega_table(write_voice(tmp_path / "voice", KMR))
    swapped = [{"a": "e", "e": "a"}.get(symbol, symbol) for symbol in KMR]
    altered = write_voice(tmp_path / "altered", swapped)
    theirs = reference_ids(altered, SENTENCES)
    differing = sum(table.encode(text) != ids for text, ids in zip(SENTENCES, theirs, strict=True))
    assert differing >= 30


def test_refused_tokenizer_files_name_the_file_and_field(tmp_path: Path) -> None:
    folder = write_voice(tmp_path / "phonemes", KMR, phonemize=True)
    with pytest.raises(ProfileError, match=r"tokenizer_config.json: phonemize is not false"):
        read_tokenizer_folder(folder)
    gap = write_voice(tmp_path / "gap", KMR)
    (gap / "vocab.json").write_text(json.dumps({"a": 0, "b": 2}), encoding="utf-8")
    with pytest.raises(ProfileError, match=r"vocab.json: the ids are not 0..1"):
        read_tokenizer_folder(gap)


def expected_drops(texts: list[str]) -> Counter[str]:
    """What the Kurmanji voice drops, counted independently: lowercased, every character outside KMR."""
    return Counter(char for text in texts for char in text.lower() if char not in KMR)


def kurmanji_corpus(folder: Path) -> Path:
    """The test voice's recordings with the fixed sentences as their transcripts."""
    (folder / "wavs").mkdir(parents=True)
    lines = []
    for number, wav in enumerate(sorted((TEST_VOICE / "wavs").glob("*.wav"))):
        (folder / "wavs" / wav.name).hardlink_to(wav)
        lines.append(f"{wav.stem}|{SENTENCES[number].strip()}")
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_check_data_counts_the_characters_the_voice_drops(tmp_path: Path, capsys) -> None:
    corpus = kurmanji_corpus(tmp_path / "corpus")
    voice = write_voice(tmp_path / "kmr", KMR)
    assert main(["check-data", str(corpus), "--tokenizer", str(voice), "--no-cache", "--json", "--items"]) == 0
    report = json.loads(capsys.readouterr().out)
    texts = [item["text"] for item in report["items"]]
    found = report["tokenizer"]
    assert found["transcripts"] == len(texts) == 40 and found["dropped"] == dict(expected_drops(texts))
    assert found["transcripts_with_drops"] == sum(bool(expected_drops([text])) for text in texts)
    assert found["characters_dropped"] == sum(found["dropped"].values()) and found["dropped"]["."] > 10
    assert main(["check-data", str(corpus), "--tokenizer", str(voice), "--no-cache"]) == 0
    shown = capsys.readouterr().out
    assert f"Dropped by the tokenizer of {voice}: {found['characters_dropped']} characters in" in shown
    assert "CYRILLIC SMALL LETTER A " in shown and "… and" in shown


def test_the_plan_of_a_run_started_from_a_transformers_voice_says_what_it_drops(tmp_path: Path) -> None:
    from hf_reference import make_folder

    # A whole transformers folder (the plan checks its weights), then the hub's tokenizer files over its own.
    make_folder(tmp_path / "mms", vocab={symbol: index for index, symbol in enumerate(KMR)})
    voice = write_voice(tmp_path / "mms", KMR)
    corpus = kurmanji_corpus(tmp_path / "corpus")
    profile = load_profile(find_profile("vits-small"), [f"data.path={corpus}", f"train.init_from={voice}"])
    report = scan_data(corpus, "voice", 0.1, 30.0, workers=1)
    start, mapping = plan_voice_start(profile, report, None, tmp_path / "run")
    assert start is not None and start.tokenizer == read_tokenizer_folder(voice, str(voice))
    assert start.id_map == {symbol: [index] for index, symbol in enumerate(KMR)} and start.num_symbols == len(KMR)
    texts = [item.text for item in report.items]
    assert mapping is not None and mapping["dropped"] == dict(expected_drops(texts))
    assert mapping["symbols_new_count"] == 0 and mapping["transcripts_sampled"] == 40
    assert "; dropped by its text front end (not in its vocabulary): '.' x" in mapping["text"]


def test_a_vits_task_started_from_a_transformers_voice_trains_on_vits_tokenizers_ids(tmp_path: Path) -> None:
    from trainer_core.models.vits.task import VitsTask

    voice = write_voice(tmp_path / "mms", KMR)
    corpus = kurmanji_corpus(tmp_path / "corpus")
    toml = tmp_path / "vits.toml"
    toml.write_text(tiny_profile("vits", data={"cache_dir": str(tmp_path / "cache")}), encoding="utf-8")
    profile = load_profile(toml, [f"data.path={corpus}"])
    start = VoiceStart(mms_id_map(read_tokenizer_folder(voice)), len(KMR), read_tokenizer_folder(voice))
    task = VitsTask(profile, scan_data(corpus, "voice", 0.1, 30.0, workers=1), "cpu", start=start)
    assert task.added_symbols == [] and task.symbols.mms == start.tokenizer
    theirs = reference_ids(voice, task.waves.texts)
    assert [ids.tolist() for ids in task.dataset.tokens] == theirs
    assert len(task.dataset.empty_text_ids) == theirs.count([]) > 0  # nothing left to say: not trained on
    # What the run's checkpoints and export keep rebuilds the front end, and writes the same files.
    kept = SymbolTable.from_state(json.loads(json.dumps(task.model_config()["symbols"])))
    write_tokenizer_files(kept, tmp_path / "export")
    assert reference_ids(tmp_path / "export", SENTENCES) == [kept.encode(text) for text in SENTENCES]
