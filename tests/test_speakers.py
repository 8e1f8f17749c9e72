"""Multi-speaker corpora end to end: both layouts scanned, check-data and the plan, a short real training run with a
speaker embedding, samples per speaker, `synth --speaker`, the export's speaker names, evaluate and resume.

The corpus is the tests' 40-clip voice (tests/fixtures/voice) split into its two espeak-ng voices (it alternates
en-us and en-gb: odd clips are "us", even ones "gb"), once with a speaker column and once with a folder per speaker.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from conftest import TEST_VOICE, run_here, tiny_voice_profile
from trainer_core.contract.errors import DataError
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_report import VoiceItem
from trainer_core.data.speakers import decide_layout, has_speaker_column
from trainer_core.data.transcripts import MetadataTable, read_metadata
from trainer_core.models.tts import AcousticModel
from trainer_core.models.tts_config import TtsConfig, config_from_dict
from trainer_core.tiny_profiles import tiny_profile

STEPS = 4
SPEAKERS = ["gb", "us"]


def demo_rows() -> list[tuple[str, str, str]]:
    """(id, text, normalized) of every clip of the bundled demo voice, in its metadata.csv order."""
    text = (TEST_VOICE / "metadata.csv").read_text(encoding="utf-8")
    return [tuple(line.split("|")) for line in text.splitlines() if line.strip()]  # type: ignore[misc]


def speaker_of(item_id: str) -> str:
    return "us" if int(item_id.rsplit("_", 1)[1]) % 2 else "gb"


def copy_wav(item_id: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(TEST_VOICE / "wavs" / f"{item_id}.wav", folder / f"{item_id}.wav")


@pytest.fixture(scope="module")
def column_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One metadata.csv of `id|speaker|text|normalized` rows (some rows without the normalized field)."""
    root = tmp_path_factory.mktemp("column")
    lines = []
    for number, (item_id, text, normalized) in enumerate(demo_rows()):
        copy_wav(item_id, root / "wavs")
        fields = [item_id, speaker_of(item_id), text] + ([normalized] if number % 3 else [])
        lines.append("|".join(fields))
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def folder_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`DATA/<speaker>/metadata.csv` (LJSpeech rows) and `DATA/<speaker>/wavs/`."""
    root = tmp_path_factory.mktemp("folders")
    tables: dict[str, list[str]] = {name: [] for name in SPEAKERS}
    for item_id, text, normalized in demo_rows():
        speaker = speaker_of(item_id)
        copy_wav(item_id, root / speaker / "wavs")
        tables[speaker].append(f"{item_id}|{text}|{normalized}")
    for speaker, lines in tables.items():
        (root / speaker / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def per_speaker(report) -> dict[str, int]:
    return {name: figures.clips for name, figures in report.voice.speakers.items()}


# ------------------------------------------------------------------------------------------------------ the scan


@pytest.mark.parametrize(("layout", "mode"), [("column_corpus", "column"), ("folder_corpus", "folders")])
def test_both_layouts_are_read_with_per_speaker_counts(layout: str, mode: str, request: pytest.FixtureRequest) -> None:
    root = request.getfixturevalue(layout)
    report = scan_data(root, mode="voice", cache_folder=None)
    assert report.voice.speaker_mode == mode and report.voice.speaker_reason.startswith("auto:")
    assert per_speaker(report) == {"gb": 20, "us": 20}
    hours = sum(figures.hours for figures in report.voice.speakers.values())
    assert hours == pytest.approx(report.voice.hours_usable)
    items = [item for item in report.items if isinstance(item, VoiceItem)]
    assert len(items) == 40 and all(item.speaker == speaker_of(item.item_id) for item in items)
    # The text is the transcript, never the speaker: the normalized field wins where it is given.
    by_id = {item_id: (text, normalized) for item_id, text, normalized in demo_rows()}
    assert all(item.text in by_id[item.item_id] for item in items)
    assert not report.problems


def test_the_ljspeech_demo_stays_one_speaker_under_auto() -> None:
    table = read_metadata(TEST_VOICE / "metadata.csv")
    assert len(table.lines) == 40 and not has_speaker_column(table)  # id|text|normalized: spaced second fields
    report = scan_data(TEST_VOICE, mode="voice", cache_folder=None)
    assert report.voice.speaker_mode == "none" and report.voice.speakers == {}
    assert all(isinstance(item, VoiceItem) and item.speaker == "" for item in report.items)
    assert report.usable_count == 40 and not report.problems


def test_auto_needs_repeating_names_or_a_fourth_field(tmp_path: Path) -> None:
    # Ids with one-word transcripts that never repeat are not speakers; the same names repeating are.
    single_words = tmp_path / "words.csv"
    single_words.write_text("a|Hello.|hello\nb|Goodbye.|goodbye\nc|Yes.|yes\n", encoding="utf-8")
    assert not has_speaker_column(read_metadata(single_words))
    repeating = tmp_path / "repeating.csv"
    repeating.write_text("a|ann|Hello there.\nb|bob|Goodbye now.\nc|ann|Yes indeed.\nd|bob|No.\n", encoding="utf-8")
    assert has_speaker_column(read_metadata(repeating))
    four = tmp_path / "four.csv"
    four.write_text("a|ann|Dr. Who|doctor who\nb|bob|Hi.\n", encoding="utf-8")
    assert has_speaker_column(read_metadata(four))
    mostly_two = tmp_path / "two.csv"
    mostly_two.write_text("a|Hello there.\nb|Goodbye now.\nc|Yes.\nd|ann|Hi.\n", encoding="utf-8")
    assert not has_speaker_column(read_metadata(mostly_two))  # most rows are id|text


def test_auto_reads_folders_only_when_each_has_its_own_table(tmp_path: Path) -> None:
    def table(*parts: str) -> MetadataTable:
        return MetadataTable(tmp_path.joinpath(*parts, "metadata.csv"))

    clips = [tmp_path / "ann" / "wavs" / "a.wav", tmp_path / "bob" / "wavs" / "b.wav"]
    both = [table("ann"), table("bob")]
    assert decide_layout("auto", both, tmp_path, clips).mode == "folders"
    # Chapters of one reader (no table each), one folder, or a table of the whole corpus: one speaker.
    assert decide_layout("auto", [], tmp_path, clips).mode == "none"
    assert decide_layout("auto", both[:1], tmp_path, clips[:1]).mode == "none"
    assert decide_layout("auto", [*both, MetadataTable(tmp_path / "metadata.csv")], tmp_path, clips).mode == "none"
    assert decide_layout("auto", both, tmp_path, [*clips, tmp_path / "loose.wav"]).mode == "none"
    assert decide_layout("folders", [], tmp_path, clips).mode == "folders"  # asked for: no table needed
    with pytest.raises(DataError, match="unknown speaker mode 'many'"):
        decide_layout("many", [], tmp_path, clips)


def test_clips_without_a_speaker_are_listed_and_a_wrong_column_setting_is_one_clear_error(
    column_corpus: Path, folder_corpus: Path, tmp_path: Path
) -> None:
    # A clip in the data folder itself has no speaker folder; a sidecar transcript has no speaker column.
    loose = tmp_path / "loose"
    shutil.copytree(folder_corpus, loose)
    shutil.copy2(TEST_VOICE / "wavs" / "demo_001.wav", loose / "stray.wav")
    (loose / "stray.txt").write_text("A stray clip.", encoding="utf-8")
    report = scan_data(loose, mode="voice", speakers="folders", cache_folder=None)
    assert per_speaker(report) == {"gb": 20, "us": 20}
    assert [(p.path.name, p.kind) for p in report.problems] == [("stray.wav", "missing_speaker")]
    assert "speaker folder" in report.problems[0].reason

    mixed = tmp_path / "mixed"
    shutil.copytree(column_corpus, mixed)
    shutil.copy2(TEST_VOICE / "wavs" / "demo_001.wav", mixed / "wavs" / "extra.wav")
    (mixed / "wavs" / "extra.txt").write_text("An extra clip.", encoding="utf-8")
    report = scan_data(mixed, mode="voice", speakers="column", cache_folder=None)
    assert [(p.path.name, p.kind) for p in report.problems] == [("extra.wav", "missing_speaker")]
    assert "id|speaker|text" in report.problems[0].reason

    with pytest.raises(DataError, match=r'data.speakers = "column" but no row .* "none" or "auto"'):
        scan_data(TEST_VOICE, mode="voice", speakers="column", cache_folder=None)
    # Told there are no speakers, a speaker table's 4-field rows are bad rows, as before speakers existed.
    forced = scan_data(column_corpus, mode="voice", speakers="none", cache_folder=None)
    assert forced.voice.speaker_mode == "none" and forced.voice.speakers == {}
    assert any("expected id|text or id|text|normalized, found 4" in p.reason for p in forced.problems)


def test_check_data_prints_the_speakers(column_corpus: Path, folder_corpus: Path, tmp_path: Path) -> None:
    env = {**os.environ, "VEGA_CONFIG_DIR": str(tmp_path)}
    text = run_here(env, "check-data", str(column_corpus), "--no-cache")
    assert text.returncode == 0, text.stderr
    line = next(row for row in text.stdout.splitlines() if "speakers" in row)
    assert "2 — gb 20 clips" in line and "us 20 clips" in line
    assert "auto" in text.stdout and "id|speaker|text" in text.stdout
    as_json = run_here(env, "check-data", str(folder_corpus), "--no-cache", "--json", "--items")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    voice = report["summary"]["voice"]
    assert voice["speaker_mode"] == "folders"
    assert {name: f["clips"] for name, f in voice["speakers"].items()} == {"gb": 20, "us": 20}
    assert all(f["hours"] > 0 for f in voice["speakers"].values())
    assert {item["speaker"] for item in report["items"]} == set(SPEAKERS)
    single = run_here(env, "check-data", str(TEST_VOICE), "--no-cache", "--json")
    assert json.loads(single.stdout)["summary"]["voice"]["speakers"] == {}
    wrong = run_here(env, "check-data", str(TEST_VOICE), "--no-cache", "--speakers", "column")
    assert wrong.returncode == 2 and wrong.stderr.startswith("error:") and "Traceback" not in wrong.stderr


def test_the_plan_and_the_preflight_show_a_speakers_row(column_corpus: Path, tmp_path: Path) -> None:
    from trainer_core.contract.plan_report import PlanReport
    from vega_tui.widgets.preflight import plan_rows

    profile = tmp_path / "tiny.toml"
    profile.write_text(tiny_profile("tts", data={"cache_dir": str(tmp_path / "cache")}), encoding="utf-8")
    env = {**os.environ, "VEGA_CONFIG_DIR": str(tmp_path)}
    args = ["train", "--profile", str(profile), "--data", str(column_corpus), "--dry-run"]
    printed_json = run_here(env, *args, "--json").stdout
    plan = json.loads(printed_json)
    assert plan["data"]["speaker_mode"] == "column"
    assert {name: f["clips"] for name, f in plan["data"]["speakers"].items()} == {"gb": 20, "us": 20}
    rows = dict((label, str(value)) for label, value in plan_rows(PlanReport.model_validate_json(printed_json)))
    assert rows["speakers"].startswith("2 by column: gb 20 clips") and "us 20 clips" in rows["speakers"]
    bad = run_here(env, *args, "--set", 'data.speakers="many"')
    assert bad.returncode == 2 and "data.speakers" in bad.stderr and "'column', 'folders' or 'none'" in bad.stderr
    printed = run_here(env, *args)
    assert printed.returncode == 0 and any(
        "speakers" in row and "2 (column)" in row for row in printed.stdout.splitlines()
    )


# ----------------------------------------------------------------------------------------------------- the model


def test_one_speaker_models_are_unchanged_and_old_configs_load() -> None:
    base = dict(vocab_size=12, n_mels=8, hidden=16, encoder_layers=1, decoder_layers=1, heads=2, ffn_mult=1)
    old = config_from_dict({**base, "dropout": 0.0})  # an export written before speakers existed
    assert old.speakers == 1 and old.speaker_names == ()
    single = AcousticModel(old)
    assert single.speaker_embedding is None and not any("speaker" in name for name in single.state_dict())
    named = AcousticModel(TtsConfig(**base, dropout=0.0, speaker_names=("solo",)))
    assert named.speaker_embedding is None  # one named speaker needs no embedding
    multi = AcousticModel(config_from_dict({**base, "dropout": 0.0, "speakers": 2, "speaker_names": SPEAKERS}))
    assert multi.config.speaker_names == ("gb", "us")
    assert multi.state_dict()["speaker_embedding.weight"].shape == (2, 16)
    with pytest.raises(ValueError, match="speaker ids"):
        multi(torch.ones(1, 3, dtype=torch.long), torch.tensor([3]), torch.zeros(1, 8, 5), torch.tensor([5]))


# ------------------------------------------------------------------------------------------- a multi-speaker run


@pytest.fixture(scope="module")
def voice_run(column_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("multi-run")
    (root / "config").mkdir()
    profile = root / "tiny.toml"
    profile.write_text(tiny_voice_profile("multi", STEPS, STEPS, ["Hello.", "Good night."]), encoding="utf-8")
    env = {**os.environ, "VEGA_CONFIG_DIR": str(root / "config"), "OMP_NUM_THREADS": "1"}
    args = ["train", "--profile", str(profile), "--data", str(column_corpus), "--run-dir", str(root / "run")]
    result = run_here(env, *args, "--set", "train.free_running_every=1", "--set", "train.free_running_items=2")
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run", env


def test_a_run_writes_samples_per_speaker_and_keeps_the_names(voice_run: tuple[Path, dict[str, str]]) -> None:
    run, _ = voice_run
    events = [json.loads(line) for line in (run / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    scan = next(e for e in events if e["type"] == "data_scan")
    assert scan["speakers"] == {"gb": 20, "us": 20}
    samples = sorted(Path(e["path"]).name for e in events if e["type"] == "sample" and e["kind"] == "audio")
    assert samples == ["01-gb.wav", "01-us.wav", "02-gb.wav", "02-us.wav"]
    assert all((run / "samples" / f"step-{STEPS:08d}" / name).stat().st_size > 1000 for name in samples)
    assert any(e["type"] == "free_running" for e in events)  # held-out clips spoken with their speaker ids
    config = json.loads((run / "export" / "config.json").read_text(encoding="utf-8"))["model"]
    assert config["speakers"] == 2 and config["speaker_names"] == SPEAKERS
    assert config["held_out"]["speakers"] == "auto"
    checkpoint = torch.load(run / "checkpoints" / f"step-{STEPS:08d}.pt", map_location="cpu", weights_only=True)
    assert checkpoint["extra"]["model_config"]["speaker_names"] == SPEAKERS
    assert checkpoint["model"]["speaker_embedding.weight"].shape == (2, 32)
    assert checkpoint["model"]["speaker_embedding.weight"].abs().sum() > 0, "the embedding trained"


def test_synth_speaks_as_a_named_speaker_and_lists_them_for_an_unknown_name(
    voice_run: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    from trainer_core.cli.synthesiser import load_from_checkpoint, load_from_export, synthesise_to_wav

    run, env = voice_run
    out = tmp_path / "us.wav"
    known = run_here(
        env, "synth", "--export", str(run / "export"), "--speaker", "us", "--text", "Hello.", "--out", str(out)
    )
    assert known.returncode == 0, known.stderr
    assert "speaker us" in known.stdout and out.stat().st_size > 1000
    checkpoint = run / "checkpoints" / f"step-{STEPS:08d}.pt"
    unknown = run_here(
        env,
        "synth",
        "--checkpoint",
        str(checkpoint),
        "--speaker",
        "zz",
        "--text",
        "Hi.",
        "--out",
        str(tmp_path / "z.wav"),
    )
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "--speaker 'zz'" in unknown.stderr and "2 speaker(s): gb, us" in unknown.stderr
    assert not (tmp_path / "z.wav").exists()

    # The two speakers say the same text differently: the embedding reaches the mel.
    for synth in (load_from_export(run / "export"), load_from_checkpoint(checkpoint)):
        assert synth.speaker_names == SPEAKERS
        spoken = synthesise_to_wav(synth, "Hi.", tmp_path / "default.wav", iters=2)
        assert spoken["speaker"] == "gb"  # no --speaker: the first by name
        ids = synth.encoder.encode("Hello there.")
        gb, us = (synth.model.synthesise(ids, 1.0, synth.speaker_id(name)) for name in SPEAKERS)
        assert gb.shape[0] == us.shape[0] and not torch.equal(gb, us)


def test_evaluate_speaks_each_held_out_clip_as_its_speaker(
    voice_run: tuple[Path, dict[str, str]], column_corpus: Path, folder_corpus: Path
) -> None:
    from trainer_core.cli.evaluate_cmd import choose_sentences, load_voice

    run, _ = voice_run
    synth, _ = load_voice(run, "cpu")
    for corpus in (column_corpus, folder_corpus):  # the same names, read from either layout
        items = [i for i in scan_data(corpus, mode="voice", cache_folder=None).items if isinstance(i, VoiceItem)]
        sentences = choose_sentences(synth, items, None, every=True)
        assert len(sentences) == 40
        assert all(SPEAKERS[s.speaker] == speaker_of(s.item_id) for s in sentences)


def test_resume_refuses_data_with_other_speakers(voice_run: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    run, env = voice_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    profile = copy / "profile.toml"
    result = run_here(
        env, "train", "--profile", str(profile), "--data", str(TEST_VOICE), "--run-dir", str(copy),
        "--resume", "auto", "--set", f"train.max_steps={STEPS + 2}",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "speakers (gb, us) differ from the data's (one, unnamed)" in result.stderr


def test_a_multi_speaker_voice_fine_tunes_to_one_new_speaker(
    voice_run: tuple[Path, dict[str, str]], column_corpus: Path, tmp_path: Path
) -> None:
    """The "us" speaker's clips renamed to a new speaker "new" beside "gb": gb's row is kept by name, the new
    speaker's row starts fresh, every other weight comes from the voice, and the run trains to the end."""
    run, env = voice_run
    table = (column_corpus / "metadata.csv").read_text(encoding="utf-8").replace("|us|", "|new|")
    data = tmp_path / "data"
    shutil.copytree(column_corpus / "wavs", data / "wavs")
    (data / "metadata.csv").write_text(table, encoding="utf-8")
    args = ["train", "--profile", str(run / "profile.toml"), "--data", str(data), "--run-dir", str(tmp_path / "tuned")]
    result = run_here(env, *args, "--init-from", str(run))
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in (tmp_path / "tuned" / "events.jsonl").read_text().splitlines()]
    started = next(e for e in events if e["type"] == "init_from")
    speakers = next(m for m in started["mapped"] if m["by"] == "speaker")
    assert (speakers["kept"], speakers["rows"]) == (1, 2)  # gb by name; "new" is fresh
    assert started["skipped"] == 0 and started["loaded"] > 10
    assert events[-1]["type"] == "finished" and events[-1]["status"] == "completed"
    names = json.loads((tmp_path / "tuned" / "export" / "config.json").read_text())["model"]["speaker_names"]
    assert names == ["gb", "new"]
