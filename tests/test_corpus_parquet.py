"""Hugging Face `datasets` folders as data.path: parquet shards and save_to_disk folders.

The files are written with pyarrow in the layout `datasets` writes (see tests/corpus_builders.py;
the `datasets` package is not installed here): an audio column of struct<bytes, path> holding FLAC,
WAV and MP3 bytes, one variant whose audio column is a path string, and a save_to_disk DatasetDict
of Arrow streams. Problem rows are named by shard and row; validation/test splits are held out and
never train; the audio bytes are written out once, so a second scan neither rewrites nor reads them
again.
"""

from __future__ import annotations

import builtins
import json
import sys
from pathlib import Path

import pytest

from corpus_builders import (
    check_data_json,
    parquet_folder,
    parquet_path_folder,
    problem_key,
    save_to_disk_folder,
    scan,
    voice_items,
)
from trainer_core.contract.errors import DataError
from trainer_core.contract.profile import Profile
from trainer_core.data import audio_probe
from trainer_core.data.corpus_layout import CorpusOptions
from trainer_core.data.parquet_corpus import find_shards, sniff_suffix, split_of
from trainer_core.data.scan import scan_data
from trainer_core.models.registry import build_task
from trainer_core.tiny_profiles import Kind, tiny_sections


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf") / "kmr-parquet"
    parquet_folder(root)
    return root


def test_check_data_names_each_problem_row_by_shard_and_row(parquet: Path, tmp_path: Path) -> None:
    report = check_data_json(parquet, "--cache-dir", str(tmp_path))
    problems = {problem_key(p) for p in report["problems"]}
    assert problems == {
        ("train-00000-of-00002.parquet", "empty_transcript", "row 2"),
        ("train-00001-of-00002.parquet", "unreadable", "row 1"),
        ("train-00001-of-00002.parquet", "missing_audio", "row 3"),
    }
    voice = report["summary"]["voice"]
    assert (voice["corpus_format"], voice["usable"], voice["held_out"]) == ("parquet", 10, 3)
    assert set(voice["formats"]) == {"FLAC/PCM_16", "WAV/PCM_16", "MP3/MPEG_LAYER_III"}
    assert "rows listed per split: train 8, validation 3" in voice["corpus_note"]
    assert "files of splits that never train, not read: other 1" in voice["corpus_note"]
    held = {item["item_id"] for item in report["items"] if item["held_out"]}
    assert held == {f"data-validation-00000-of-00001#{row}" for row in range(3)}
    assert not any(item["held_out"] for item in report["items"] if "-train-" in item["item_id"])


def test_audio_is_written_out_once_and_not_read_again(
    parquet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = scan(parquet, tmp_path)
    clips = sorted((tmp_path / "clips").rglob("0*.*"))
    assert {path.suffix for path in clips} == {".flac", ".wav", ".mp3"}
    stamps = {path: path.stat().st_mtime_ns for path in clips}
    scan_cache = next((tmp_path / "scan").glob("*.json"))
    known = json.loads(scan_cache.read_text(encoding="utf-8"))["files"]
    assert len(known) == 10  # every readable clip
    reads: list[Path] = []
    real = audio_probe.read_header
    monkeypatch.setattr(audio_probe, "read_header", lambda path: reads.append(path) or real(path))
    second = scan(parquet, tmp_path)
    assert second.to_dict(include_items=True) == first.to_dict(include_items=True)
    assert {path: path.stat().st_mtime_ns for path in clips} == stamps  # not written again
    assert [path.name for path in reads] == ["000001.wav"]  # only the undecodable row, tried again


def test_a_path_audio_column_and_a_named_text_column(tmp_path: Path) -> None:
    root = tmp_path / "paths"
    parquet_path_folder(root)
    report = scan(root, tmp_path)
    paths = [item.path.relative_to(root).as_posix() for item in voice_items(report)]
    assert paths == [f"wavs/w{n}.wav" for n in range(4)]
    where = "not a file beside the shard or in the data folder"
    missing = f"row 4: no audio: the cell names 'wavs/missing.wav', {where}"
    assert [(p.kind, p.reason) for p in report.problems] == [("missing_audio", missing)]
    columns = "its columns are audio, transcription"
    with pytest.raises(DataError, match=f"no column 'words' \\(text\\); {columns}"):
        scan(root, tmp_path, text_column="words")


def test_save_to_disk_folder_maps_its_splits(tmp_path: Path) -> None:
    root = tmp_path / "saved"
    save_to_disk_folder(root)
    assert [path.relative_to(root).as_posix() for path in find_shards(root)] == [
        "test/data-00000-of-00001.arrow", "train/data-00000-of-00001.arrow"
    ]  # fmt: skip
    report = scan(root, tmp_path)
    assert (report.voice.corpus_format, report.voice.usable, report.voice.held_out) == (
        "arrow",
        8,
        2,
    )
    held = {item.item_id for item in voice_items(report) if item.held_out}
    assert held == {"test-data-00000-of-00001#0", "test-data-00000-of-00001#1"}
    assert not report.problems


def test_split_names_and_audio_containers() -> None:
    root = Path("/corpus")
    assert split_of(root / "data/train-00000-of-00002.parquet", root) == "train"
    assert split_of(root / "data/validation-00000-of-00001.parquet", root) == "validation"
    assert split_of(root / "kmr/test/0000.parquet", root) == "test"
    assert split_of(root / "data/other-00000-of-00001.parquet", root) == "other"
    assert split_of(root / "clips.parquet", root) == "train"
    assert sniff_suffix(b"RIFF....WAVE", "x") == ".wav"
    assert sniff_suffix(b"fLaC", "x") == ".flac"
    assert sniff_suffix(b"\xff\xf3\x88\xc4", "x") == ".mp3"
    assert sniff_suffix(b"????", "clip.ogg") == ".ogg"


def test_missing_pyarrow_names_the_folder_and_the_extra(
    parquet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def without_pyarrow(name: str, *args: object, **kwargs: object) -> object:
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    for name in [name for name in sys.modules if name == "pyarrow" or name.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(builtins, "__import__", without_pyarrow)
    with pytest.raises(DataError, match=f"{parquet}.*needs pyarrow: pip install 'vega\\[hf\\]'"):
        scan(parquet, tmp_path)


@pytest.mark.parametrize("kind", ["vocoder", "vits"])
def test_recording_tasks_validate_on_the_held_out_split_only(kind: Kind, tmp_path: Path) -> None:
    """The vocoder's and VITS's datasets keep the corpus split (tts: test_corpus_common_voice)."""
    root = tmp_path / "saved"
    save_to_disk_folder(root)
    sections = tiny_sections(kind, data={"path": str(root), "cache_dir": str(tmp_path / "cache")})
    task = build_task(Profile.model_validate(sections), root, "cpu")
    dataset, names = task.dataset, task.waves.item_ids  # type: ignore[attr-defined]
    held = {"test-data-00000-of-00001#0", "test-data-00000-of-00001#1"}
    assert {names[i] for i in dataset.val_ids} == held
    trained = {names[i] for i in dataset.train_ids}
    assert trained == {f"train-data-00000-of-00001#{row}" for row in range(6)}


def test_an_unwritable_clips_folder_is_a_clear_error(parquet: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the clips folder should be", encoding="utf-8")
    options = CorpusOptions(clips_dir=blocker)
    shard = "train-00000-of-00002.parquet"
    with pytest.raises(DataError, match=f"cannot write the audio of .*{shard} row 0"):
        scan_data(parquet, "voice", corpus=options, cache_folder=None)
