"""A Common Voice release folder as data.path, built in the test with real MP3 clips (soundfile's
libsndfile).

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
from conftest import run_cli
from corpus_builders import common_voice_folder
from rich.console import Console

from trainer_core.cli.check_data_cmd import show_report
from trainer_core.contract.profile import DataSection, Profile
from trainer_core.data import audio_probe
from trainer_core.data.corpus_layout import CorpusOptions
from trainer_core.data.item_selection import scan_for_training, select_items
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_report import DataReport, VoiceItem
from trainer_core.models.registry import build_task
from trainer_core.tiny_profiles import tiny_profile, tiny_sections


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("cv") / "cv-corpus-kmr"
    return root, common_voice_folder(root)


def stems(names: list[str]) -> set[str]:
    return {Path(name).stem for name in names}


def scan(root: Path, tmp_path: Path, **options: object) -> DataReport:
    corpus = CorpusOptions(**options, clips_dir=tmp_path / "clips")  # type: ignore[arg-type]
    return scan_data(root, "voice", 0.3, 20.0, workers=2, cache_folder=tmp_path / "scan", corpus=corpus)


def voice_items(report: DataReport) -> list[VoiceItem]:
    return [item for item in report.items if isinstance(item, VoiceItem)]


def test_check_data_names_every_problem_row(release: tuple[Path, dict[str, list[str]]], tmp_path: Path) -> None:
    root, _ = release
    options = ("--json", "--items", "--min-up-votes", "2", "--cache-dir", str(tmp_path))
    result = run_cli(dict(os.environ), "check-data", str(root), *options)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    problems = {(Path(p["path"]).name, p["kind"], p["reason"].split(":")[0]) for p in report["problems"]}
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
    assert 'he said "hello to everyone' in texts  # the lone quote is text, not the start of a quoted field
    assert "few votes here" not in texts


def test_human_report_lists_each_problem_row_with_its_line(
    release: tuple[Path, dict[str, list[str]]], tmp_path: Path
) -> None:
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
    assert "common_voice: trains on validated.tsv (10 rows not in dev/test); held out: dev.tsv 2, test.tsv 1" in text
    assert "3 clips (the corpus's own split; they never train)" in text


def test_dev_and_test_clips_are_held_out_and_never_train(
    release: tuple[Path, dict[str, list[str]]], tmp_path: Path
) -> None:
    root, roles = release
    items = voice_items(scan(root, tmp_path))
    held = {item.item_id for item in items if item.held_out}
    train = {item.item_id for item in items if not item.held_out}
    assert held == stems(roles["held_out"])  # listed in validated.tsv too, they are still held out
    assert train == stems(roles["train"]) | {"common_voice_kmr_012"}
    assert not held & train
    own_train = voice_items(scan(root, tmp_path, common_voice_train="train"))
    assert {item.item_id for item in own_train if not item.held_out} == stems(roles["train"][:4])


def test_client_id_is_the_speaker_when_asked(release: tuple[Path, dict[str, list[str]]], tmp_path: Path) -> None:
    root, _ = release
    report = scan(root, tmp_path, speakers="column")
    assert {name: figures.clips for name, figures in report.voice.speakers.items()} == {
        "spk_a": 4, "spk_b": 5, "spk_c": 3
    }  # fmt: skip
    assert not scan(root, tmp_path).voice.speakers  # one speaker unless asked


def test_second_scan_reads_no_clip_again(
    release: tuple[Path, dict[str, list[str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
    assert [path.name for path in reads] == ["common_voice_kmr_013.mp3"]  # only the unreadable one is tried again


def test_held_out_cap_and_max_items(release: tuple[Path, dict[str, list[str]]], tmp_path: Path) -> None:
    root, _ = release
    data = DataSection(path=root, cache_dir=tmp_path, val_max_items=2, max_items=4)
    chosen = voice_items(scan_for_training(data, seed=1))
    assert sum(item.held_out for item in chosen) == 2 and sum(not item.held_out for item in chosen) == 4
    again = voice_items(scan_for_training(data, seed=1))
    assert [item.item_id for item in again] == [item.item_id for item in chosen]
    other_seeds = {tuple(i.item_id for i in voice_items(scan_for_training(data, seed=s))) for s in range(2, 6)}
    assert len(other_seeds | {tuple(i.item_id for i in chosen)}) > 1  # the subset follows run.seed
    full = scan(root, tmp_path)
    assert select_items(full, DataSection(path=root), seed=1) is full  # nothing to choose: the scan as it is


def test_task_split_and_a_resumed_run_keep_held_out_clips_out_of_training(
    release: tuple[Path, dict[str, list[str]]], tmp_path: Path
) -> None:
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
    first = run_cli(env, "train", "--profile", str(profile), "--run-dir", str(run), "--events", "-")
    assert first.returncode == 0, first.stderr[-2000:]
    recorded = (run / "items.jsonl").read_text(encoding="utf-8")
    resumed = run_cli(env, "train", "--profile", str(profile), "--run-dir", str(run), "--resume", "auto",
                      "--set", "train.max_steps=3", "--events", "-")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (run / "items.jsonl").read_text(encoding="utf-8") == recorded
    events = [json.loads(line) for line in (run / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    assert not [e for e in events if e["type"] == "warning" and e.get("code") == "items_changed"]
    assert max(e["step"] for e in events if e["type"] == "step") == 3
    items = [json.loads(line) for line in recorded.splitlines()]
    trained = {item["id"] for item in items if not item["held_out"]}
    assert len(trained) == 8 and not trained & stems(roles["held_out"])
    assert {item["id"] for item in items if item["held_out"]} == stems(roles["held_out"])
    scans = [e for e in events if e["type"] == "data_scan"]
    assert len(scans) == 2 and all(e["usable"] == 11 for e in scans)  # 8 of 9 training clips and 3 held out


def test_the_tasks_own_split_is_the_corpus_split(release: tuple[Path, dict[str, list[str]]], tmp_path: Path) -> None:
    """The tts task's datasets validate on exactly the dev/test clips and train on none of them."""
    root, roles = release
    sections = tiny_sections("tts", data={"path": str(root), "cache_dir": str(tmp_path)}, tts={"text_units": "chars"})
    profile = Profile.model_validate(sections)
    task = build_task(profile, root, "cpu")
    dataset = task.dataset  # type: ignore[attr-defined]
    ids = dataset.features.item_ids
    assert {ids[i] for i in dataset.val_ids} == stems(roles["held_out"])
    assert {ids[i] for i in dataset.train_ids} == stems(roles["train"]) | {"common_voice_kmr_012"}
