"""A Common Voice release folder as data.path, built in the test with real MP3 clips (soundfile).

What people meet in a release: a lone double quote in a sentence (the tables are read with quoting
off), dev and test clips listed in validated.tsv too, a clip listed in both dev.tsv and test.tsv, a
missing clip, an empty sentence, a clip that does not decode, a broken row and a row under the
up-vote minimum. check-data names every problem row; held-out clips never train (at the scan, in
the task's own split, and in a real run); a second scan reads nothing again; data.max_items picks
the same items when a run resumes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from conftest import TEST_VOICE, run_here
from corpus_builders import check_data_json, common_voice_folder, problem_key, scan, voice_items
from trainer_core.cli.check_data_cmd import show_report
from trainer_core.contract.errors import DataError
from trainer_core.contract.profile import DataSection, Profile
from trainer_core.data import audio_probe, common_voice
from trainer_core.data.item_selection import record_items, scan_for_training, select_items
from trainer_core.data.scan import scan_data
from trainer_core.data.voice_dataset import split_items
from trainer_core.models.registry import build_task
from trainer_core.tiny_profiles import tiny_profile, tiny_sections

Release = tuple[Path, dict[str, list[str]]]


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    root = tmp_path_factory.mktemp("cv") / "cv-corpus-kmr"
    return root, common_voice_folder(root)


def stems(names: list[str]) -> set[str]:
    return {Path(name).stem for name in names}


def test_check_data_names_every_problem_row(release: Release, tmp_path: Path) -> None:
    root, _ = release
    report = check_data_json(root, "--min-up-votes", "2", "--cache-dir", str(tmp_path))
    problems = {problem_key(p) for p in report["problems"]}
    assert problems == {
        ("validated.tsv", "missing_audio", "line 13"),
        ("validated.tsv", "empty_transcript", "line 14"),
        ("common_voice_kmr_013.mp3", "unreadable", "validated.tsv line 15"),
        ("validated.tsv", "metadata_row", "line 16"),
        ("test.tsv", "duplicate", "line 3"),
    }
    reasons = {p["kind"]: p["reason"] for p in report["problems"]}
    assert "common_voice_kmr_014.mp3 is listed but not in clips/" in reasons["missing_audio"]
    assert "3 tab-separated fields where the header has 13" in reasons["metadata_row"]
    voice = report["summary"]["voice"]
    assert (voice["corpus_format"], voice["usable"], voice["held_out"]) == ("common_voice", 11, 3)
    assert "1 rows under data.min_up_votes=2 skipped" in voice["corpus_note"]
    assert voice["formats"] == {"MP3/MPEG_LAYER_III": 11}
    texts = {item["text"] for item in report["items"]}
    assert 'he said "hello to everyone' in texts  # a lone quote is text, not a quoted field
    assert "few votes here" not in texts


def test_human_report_names_each_problem_row(release: Release, tmp_path: Path) -> None:
    root, _ = release
    console = Console(record=True, width=240)
    show_report(scan(root, tmp_path), console)
    text = console.export_text()
    for line in (
        "line 13: common_voice_kmr_014.mp3 is listed but not in clips/",
        "line 14: common_voice_kmr_011.mp3 has an empty sentence",
        "validated.tsv line 15: unreadable",
        "line 16: 3 tab-separated fields",
    ):
        assert line in text
    chosen = "trains on validated.tsv (10 rows not in dev/test); held out: dev.tsv 2, test.tsv 1"
    assert f"common_voice: {chosen}" in text
    assert "3 clips (the corpus's own split; they never train)" in text


def test_dev_and_test_clips_are_held_out_and_never_train(release: Release, tmp_path: Path) -> None:
    root, roles = release
    items = voice_items(scan(root, tmp_path))
    held = {item.item_id for item in items if item.held_out}
    train = {item.item_id for item in items if not item.held_out}
    assert held == stems(roles["held_out"])  # listed in validated.tsv too, they are still held out
    assert train == stems(roles["train"]) | {"common_voice_kmr_012"}
    assert not held & train
    own_train = voice_items(scan(root, tmp_path, common_voice_train="train"))
    assert {item.item_id for item in own_train if not item.held_out} == stems(roles["train"][:4])


def test_client_id_is_the_speaker_when_asked(release: Release, tmp_path: Path) -> None:
    root, _ = release
    report = scan(root, tmp_path, speakers="column")
    assert {name: figures.clips for name, figures in report.voice.speakers.items()} == {
        "spk_a": 4, "spk_b": 5, "spk_c": 3
    }  # fmt: skip
    assert not scan(root, tmp_path).voice.speakers  # one speaker unless asked


def test_second_scan_reads_no_clip_again(
    release: Release,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, _ = release
    first = scan(root, tmp_path)
    reads: list[Path] = []
    real = audio_probe.read_header

    def counted(path: Path) -> audio_probe.AudioHeader:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(audio_probe, "read_header", counted)
    second = scan(root, tmp_path)
    assert second.to_dict() == first.to_dict()
    assert [path.name for path in reads] == ["common_voice_kmr_013.mp3"]  # only the unreadable


def test_held_out_cap_and_max_items(release: Release, tmp_path: Path) -> None:
    root, _ = release
    data = DataSection(path=root, cache_dir=tmp_path, val_max_items=2, max_items=4)
    chosen = voice_items(scan_for_training(data, seed=1))
    assert [item.held_out for item in chosen].count(True) == 2
    assert [item.held_out for item in chosen].count(False) == 4
    again = voice_items(scan_for_training(data, seed=1))
    assert [item.item_id for item in again] == [item.item_id for item in chosen]

    def ids(seed: int) -> tuple[str, ...]:
        return tuple(item.item_id for item in voice_items(scan_for_training(data, seed=seed)))

    assert len({ids(seed) for seed in range(1, 6)}) > 1  # the subset follows run.seed
    full = scan(root, tmp_path)
    assert select_items(full, DataSection(path=root), seed=1) is full  # nothing to choose


def test_a_resumed_run_keeps_its_items(release: Release, tmp_path: Path) -> None:
    """A tiny tts run on 8 of the 9 training clips (data.max_items), stopped and resumed: the
    second start chose the very same items (no items_changed warning); no held-out clip trains."""
    root, roles = release
    profile = tmp_path / "cv.toml"
    profile.write_text(
        tiny_profile(
            "tts",
            run={"name": "cv", "seed": 3},
            data={
                "path": str(root),
                "cache_dir": str(tmp_path / "cache"),
                "max_items": 8,
                "speakers": "none",
            },
            train={"warmup_steps": 1, "max_steps": 2, "batch_size": 4, "free_running_every": 0},
            tts={"text_units": "chars", "griffin_lim_iters": 2},
            sample={"sentences": []},
            logging={"step_interval_s": None},
        ),
        encoding="utf-8",
    )
    run = tmp_path / "run"
    (tmp_path / "config").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(tmp_path / "config"), OMP_NUM_THREADS="1")
    train = ("train", "--profile", str(profile), "--run-dir", str(run), "--events", "-")
    first = run_here(env, *train)
    assert first.returncode == 0, first.stderr[-2000:]
    recorded = (run / "items.jsonl").read_text(encoding="utf-8")
    resumed = run_here(env, *train, "--resume", "auto", "--set", "train.max_steps=3")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (run / "items.jsonl").read_text(encoding="utf-8") == recorded
    lines = (run / "events.jsonl").read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert not [e for e in events if e["type"] == "warning" and e.get("code") == "items_changed"]
    assert max(e["step"] for e in events if e["type"] == "step") == 3
    items = [json.loads(line) for line in recorded.splitlines()]
    trained = {item["id"] for item in items if not item["held_out"]}
    assert len(trained) == 8 and not trained & stems(roles["held_out"])
    assert {item["id"] for item in items if item["held_out"]} == stems(roles["held_out"])
    scans = [e for e in events if e["type"] == "data_scan"]
    assert [e["usable"] for e in scans] == [11, 11]  # 8 of 9 training clips and 3 held out


def test_the_tasks_own_split_is_the_corpus_split(release: Release, tmp_path: Path) -> None:
    """The tts task's datasets validate on exactly the dev/test clips and train on none of them."""
    root, roles = release
    data = {"path": str(root), "cache_dir": str(tmp_path)}
    sections = tiny_sections("tts", data=data, tts={"text_units": "chars"})
    profile = Profile.model_validate(sections)
    task = build_task(profile, root, "cpu")
    dataset = task.dataset  # type: ignore[attr-defined]
    ids = dataset.features.item_ids
    assert {ids[i] for i in dataset.val_ids} == stems(roles["held_out"])
    assert {ids[i] for i in dataset.train_ids} == stems(roles["train"]) | {"common_voice_kmr_012"}


def test_max_items_on_a_plain_folder_keeps_the_full_split(tmp_path: Path) -> None:
    """Any voice corpus: the held-out items are the ones the whole folder's split holds out."""
    full = scan_data(TEST_VOICE, "voice", cache_folder=None)
    data = DataSection(path=TEST_VOICE, val_fraction=0.1, max_items=10)
    chosen = voice_items(select_items(full, data, seed=3))
    every = voice_items(full)
    _, held = split_items([item.item_id for item in every], 0.1, data.val_max_items)
    assert {item.item_id for item in chosen if item.held_out} == {every[i].item_id for i in held}
    assert len([item for item in chosen if not item.held_out]) == 10


def test_a_start_whose_items_differ_is_told(tmp_path: Path) -> None:
    record = tmp_path / "items.jsonl"
    full = scan_data(TEST_VOICE, "voice", cache_folder=None)
    fewer = select_items(full, DataSection(path=TEST_VOICE, max_items=5), seed=3)
    assert record_items(record, fewer) is None and record.is_file()  # the first start writes it
    assert record_items(record, fewer) is None  # the same items: nothing to say
    message = record_items(record, full)
    assert message is not None and "the data changed since this run began" in message


def test_a_libsndfile_without_mp3_is_named(
    release: Release,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common_voice, "supported_suffixes", lambda: frozenset({".wav", ".flac"}))
    with pytest.raises(DataError, match="its clips are MP3, which the installed libsndfile"):
        scan(release[0], tmp_path)
