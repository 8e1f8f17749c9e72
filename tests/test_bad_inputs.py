"""Bad inputs the bad-input drill (bench/bad_inputs.py) found slipping through, named now.

Audio with NaN or infinite samples and compressed files cut short were trained on; so were
transcripts holding NUL bytes (UTF-16 files) or undecodable bytes, and a 100,000-character
transcript stalled the trainer. An unreadable folder vanished from the scan silently, an unreadable
or column-less metadata.csv was reported as missing, an export config of the wrong types raised a
traceback, and a damaged best.json left the best checkpoint open to pruning. (The feature cache's
NaN check is in tests/test_feature_cache.py.)
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from trainer_core.contract.eventlog import EventWriter
from trainer_core.contract.protocol import BestModelEvent
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_report import DataReport
from trainer_core.engine.best_repair import repair_best

REPO = Path(__file__).resolve().parents[1]
RATE = 22050


def tone(seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    noise = np.random.default_rng(0).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * 180 * t) + 0.01 * noise).astype(np.float32)


def problems(report: DataReport) -> dict[str, tuple[str, str]]:
    return {p.path.name: (p.kind, p.reason) for p in report.problems}


def usable(report: DataReport) -> set[str]:
    return {Path(str(item.path)).stem for item in report.items}  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> DataReport:
    root = tmp_path_factory.mktemp("bad")
    rows = ["good|A good clip, said slowly.", "mp3|A whole MP3 clip."]
    sf.write(root / "good.wav", tone(), RATE, subtype="PCM_16")
    sf.write(root / "mp3.mp3", tone(2.0), RATE, format="MP3")
    wave = tone()
    wave[100:110] = np.nan
    wave[500] = np.inf
    sf.write(root / "nan.wav", wave, RATE, subtype="FLOAT")
    sf.write(root / "whole.mp3", tone(2.0), RATE, format="MP3")
    data = (root / "whole.mp3").read_bytes()
    (root / "whole.mp3").unlink()
    (root / "cut.mp3").write_bytes(data[: len(data) // 2])
    for name in ("nul", "wide", "latin", "essay"):
        sf.write(root / f"{name}.wav", tone(1.5), RATE, subtype="PCM_16")
    rows += ["nan|Some text.", "cut|Some text.", "nul|A NUL \x00 byte."]
    rows.append("essay|" + "word " * 20000)
    (root / "wide.txt").write_bytes("Saved as UTF-16.".encode("utf-16"))
    (root / "latin.txt").write_bytes("Crème brûlée.".encode("cp1252"))
    (root / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return scan_data(root, "voice", workers=2)


def test_good_clips_and_a_whole_mp3_stay_usable(report: DataReport) -> None:
    assert usable(report) == {"good", "mp3"}


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [
        ("nan.wav", "nonfinite", "11 NaN or infinite"),
        ("cut.mp3", "truncated", "header promises 2.00 s but only"),
        ("nul.wav", "bad_transcript", "U+0000 (a UTF-16 file?)"),
        ("wide.wav", "bad_transcript", "wide.txt: it holds control character U+0000"),
        ("latin.wav", "bad_transcript", "latin.txt: it is not valid UTF-8"),
        ("essay.wav", "transcript_too_long", "99,999 characters in metadata.csv line 6"),
    ],
)
def test_each_bad_input_is_listed_with_its_reason(
    report: DataReport,
    name: str,
    kind: str,
    words: str,
) -> None:
    found_kind, reason = problems(report)[name]
    assert found_kind == kind and words in reason, reason


def drop_read_override() -> None:
    """As root, stop reading past file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), as a user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def check_data(folder: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "trainer_core", "check-data", str(folder), "--json"]
    argv.append("--no-cache")
    hook = drop_read_override if os.geteuid() == 0 else None
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        preexec_fn=hook,  # noqa: PLW1509 - no threads here
    )


def test_unreadable_folders_clips_and_tables_are_named_with_what_to_do(tmp_path: Path) -> None:
    root = tmp_path / "voice"
    (root / "locked").mkdir(parents=True)
    sf.write(root / "good.wav", tone(), RATE, subtype="PCM_16")
    sf.write(root / "shut.wav", tone(), RATE, subtype="PCM_16")
    sf.write(root / "locked" / "inside.wav", tone(), RATE, subtype="PCM_16")
    rows = "good|A good clip, said slowly.\nshut|Some text.\ninside|Some text.\n"
    (root / "metadata.csv").write_text(rows, encoding="utf-8")
    (root / "shut.wav").chmod(0)
    (root / "locked").chmod(0)
    try:
        done = check_data(root)
    except subprocess.SubprocessError as exc:  # root without CAP_SETPCAP reads every file
        pytest.skip(f"cannot make a file unreadable to root here: {exc}")
    assert done.returncode == 0, done.stderr
    found = {Path(p["path"]).name: p["reason"] for p in json.loads(done.stdout)["problems"]}
    assert "unreadable folder (Permission denied): the files in it were not" in found["locked"]
    shut = "unreadable: cannot open it (Permission denied): check its permissions"
    assert found["shut.wav"] == shut
    (root / "metadata.csv").chmod(0)
    done = check_data(root)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "metadata.csv: cannot read it (Permission denied): its transcripts" in done.stderr


def write_best_events(run_dir: Path, steps: list[int]) -> None:
    with EventWriter(run_dir / "events.jsonl") as writer:
        for step in steps:
            path = run_dir / "checkpoints" / f"step-{step:08d}.pt"
            writer.emit(BestModelEvent(step=step, path=str(path), val_loss=1.0 / step))


def test_a_damaged_best_json_is_rebuilt_from_the_event_log(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in (2, 4, 6):
        (folder / f"step-{step:08d}.pt").write_bytes(b"weights")
    write_best_events(tmp_path, [2, 4, 8])  # step 8 is gone: the newest best still here is 4
    assert repair_best(tmp_path) is None  # no best.json: nothing to repair
    (folder / "best.json").write_bytes(b"\x00\xff{not json")
    said = repair_best(tmp_path)
    assert said is not None and "rebuilt from events.jsonl" in said and "step-00000004.pt" in said
    record = {"step": 4, "path": "step-00000004.pt", "val_loss": 0.25}
    assert json.loads((folder / "best.json").read_text()) == record
    assert repair_best(tmp_path) is None  # whole again


def test_a_damaged_best_json_with_no_best_on_record_says_so(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.json").write_text('{"path": "../../elsewhere.pt"}')
    said = repair_best(tmp_path)
    assert said is not None and "names no best checkpoint that is still here" in said


def test_a_table_without_its_text_column_is_named_in_the_error(tmp_path: Path) -> None:
    from trainer_core.contract.errors import DataError

    for name in ("a", "b", "c"):
        sf.write(tmp_path / f"{name}.wav", tone(), RATE, subtype="PCM_16")
    (tmp_path / "metadata.csv").write_text("a\nb\nc\n", encoding="utf-8")
    wanted = r"metadata.csv: line 1: expected id\|text .* \(and 2 more like it\)"
    with pytest.raises(DataError, match=wanted):
        scan_data(tmp_path, "voice", workers=1)


def test_an_export_config_of_the_wrong_types_is_refused_naming_the_field() -> None:
    from trainer_core.contract.errors import VegaError
    from trainer_core.models.tts_config import config_from_dict

    good = {"vocab_size": 40, "n_mels": 80, "hidden": 32, "encoder_layers": 1, "heads": 2}
    good |= {"decoder_layers": 1, "ffn_mult": 2, "dropout": 0, "attention_dropout": None}
    good |= {"speaker_names": ["a"], "pitch": False}
    assert config_from_dict(good).hidden == 32
    wrong = (("hidden", "wide"), ("heads", -2), ("pitch", 1), ("dropout", "0.1"), ("n_mels", True))
    for field, value in wrong:
        with pytest.raises(VegaError, match=f"has {field} = {value!r}, where .* belongs"):
            config_from_dict({**good, field: value})
