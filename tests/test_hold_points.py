"""Where the kill drill's new hold points sit: what is on disk when the trainer would be held there.

The drill (bench/kill_loop.py, tests/test_reliability.py) SIGKILLs real trainers at these points;
here each point runs in-process with a hook that looks at the files at that moment, on the real
writers: the final file is still the old one (or absent) and the new bytes are half written under
a temp name. Each in-place switch (the drill's negative controls) is shown to leave the torn file
under its final name instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from trainer_core import fault_points
from trainer_core.contract.profile import Profile
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.feature_cache import FeatureCache, feature_params
from trainer_core.data.scan import scan_data
from trainer_core.data.wave_preload import preload_waves
from trainer_core.engine import checkpoint_manager, checkpoint_write, faults
from trainer_core.engine.checkpoint_manager import CheckpointManager, new_checkpoint_state, read_best
from trainer_core.models.griffin_lim import write_wav
from trainer_core.models.voice_views import new_figure, save

Look = Callable[[str], None]


@pytest.fixture
def hold(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Look], None]]:
    """`hold(look)`: every hold point calls `look(phase)` instead of blocking; the real hooks come
    back after."""
    monkeypatch.setenv("VEGA_FAULTS", "1")
    yield lambda look: fault_points.install(look, faults.phase_in_place)
    fault_points.install(faults.hold_at, faults.phase_in_place)


def temps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


def tone(samples: int = 4000) -> np.ndarray:
    return (0.3 * np.sin(np.arange(samples) / 7.0)).astype(np.float32)


def test_samples_and_views_are_half_written_under_a_temp_name_when_held(
    hold: Callable[[Look], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wav, png = tmp_path / "step-00000005" / "01.wav", tmp_path / "step-00000005" / "mel.png"
    seen: list[tuple[str, bool, list[int]]] = []

    def look(phase: str) -> None:
        target = wav if not wav.exists() else png
        seen.append((phase, target.exists(), [p.stat().st_size for p in temps(target.parent)]))

    hold(look)
    write_wav(wav, tone(), 16000)
    figure = new_figure((1.0, 1.0))
    figure.subplots().plot([0, 1])
    save(figure, png)
    assert [(phase, exists) for phase, exists, _ in seen] == [("sample_write", False)] * 2
    assert seen[0][2] == [wav.stat().st_size // 2] and seen[1][2] == [png.stat().st_size // 2]
    assert temps(wav.parent) == [] and sf.info(str(wav)).frames == 4000
    # Negative control: in place, the held file is the torn one under its final name.
    monkeypatch.setenv(faults.SAMPLE_IN_PLACE_ENV, "1")
    torn: list[int] = []
    hold(lambda phase: torn.append(wav.stat().st_size))
    write_wav(wav, tone(), 16000)
    assert torn == [wav.stat().st_size // 2]


def state(step: int) -> dict:
    weights = {"w": torch.full((4000,), float(step))}
    return new_checkpoint_state(model=weights, step=step, epoch=0, rng={})


def test_best_checkpoint_and_best_json_are_held_mid_write_with_the_old_best_in_force(
    hold: Callable[[Look], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    manager.save(state(1), 1, val_loss=2.0, is_best=True)
    seen: list[tuple[str, str | None, list[Path]]] = []

    def look(phase: str) -> None:
        best = read_best(manager.folder)
        seen.append((phase, best["path"] if best else None, temps(manager.folder)))

    monkeypatch.setattr(checkpoint_write, "hold_at", look)  # the engine's own: write, best_write
    monkeypatch.setattr(checkpoint_manager, "hold_at", look)  # and prune
    hold(look)
    manager.save(state(2), 2)  # not a best: no best_write, no best_json
    manager.save(state(3), 3, val_loss=1.0, is_best=True)
    phases = [phase for phase, _, _ in seen if phase not in ("rename", "prune")]
    assert phases == ["write", "write", "best_write", "best_json"], seen
    held = {phase: (best, [path.name for path in names]) for phase, best, names in seen}
    # The old best in force at both holds, the new file half written under a temp name.
    assert held["best_write"][0] == "step-00000001.pt"
    assert held["best_write"][1][0].startswith(".step-00000003")
    assert held["best_json"][0] == "step-00000001.pt"
    assert held["best_json"][1][0].startswith(".best.json")
    assert read_best(manager.folder)["path"] == "step-00000003.pt" and temps(manager.folder) == []
    # Negative control: best.json written in place is torn while held.
    monkeypatch.setenv(faults.BEST_IN_PLACE_ENV, "1")
    torn: list[str] = []
    hold(lambda phase: torn.append((manager.folder / "best.json").read_text()))
    manager.save(state(4), 4, val_loss=0.5, is_best=True)
    with pytest.raises(ValueError):
        json.loads(torn[0])


def recordings(folder: Path, count: int) -> list[Path]:
    folder.mkdir()
    paths = [folder / f"{i}.wav" for i in range(count)]
    for path in paths:
        path.write_bytes(path.name.encode() * 10)
    return paths


def test_the_feature_cache_is_held_half_written_data_then_index_with_the_old_pair_in_force(
    hold: Callable[[Look], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    params, paths = feature_params(AudioSection(n_mels=8)), recordings(tmp_path / "voice", 4)
    first = FeatureCache(tmp_path / "cache", params, tmp_path / "voice")
    first.put(paths[0], torch.ones(8, 3))
    assert first.flush()
    seen: list[tuple[int, list[str]]] = []

    def reader() -> FeatureCache:
        return FeatureCache(tmp_path / "cache", params, tmp_path / "voice")

    def look(phase: str) -> None:
        now = reader()  # what a writer killed here leaves
        assert now.warnings == [] and now.get(paths[0]) is not None
        held = sum(now.get(p) is not None for p in paths)
        seen.append((held, [p.name for p in temps(now.entries_dir)]))

    hold(look)
    cache = FeatureCache(tmp_path / "cache", params, tmp_path / "voice")
    for i, path in enumerate(paths[1:], start=1):
        cache.put(path, torch.full((8, 3), float(i)))
    assert cache.flush()
    assert [held for held, _ in seen] == [1, 1]  # the old pair in force at both holds
    assert ".f32." in seen[0][1][0] and ".index.json." in seen[1][1][0]  # data file, then index
    assert sum(reader().get(p) is not None for p in paths) == 4
    # Negative control: the index written in place is torn while held; a reader warns and rebuilds.
    monkeypatch.setenv(faults.CACHE_IN_PLACE_ENV, "1")
    warned: list[list[str]] = []
    hold(lambda phase: warned.append(reader().warnings))
    cache.put(paths[0], torch.zeros(8, 2))
    assert cache.flush()
    assert warned[0] == [] and "damaged" in warned[1][0]


def test_a_cold_preload_is_held_after_each_decoded_item_before_anything_is_cached(
    hold: Callable[[Look], None], tmp_path: Path
) -> None:
    voice = tmp_path / "voice"
    voice.mkdir()
    for name in "abc":
        sf.write(voice / f"{name}.wav", tone(22050), 22050)
        (voice / f"{name}.txt").write_text(f"item {name}", encoding="utf-8")
    profile = Profile()
    profile.data.cache_dir = tmp_path / "cache"
    cached: list[tuple[str, int]] = []
    indexes = tmp_path / "cache"
    hold(lambda phase: cached.append((phase, len(list(indexes.glob("*/*.index.json"))))))
    waves = preload_waves(scan_data(voice, "voice"), profile, "ram")
    assert waves.decoded == 3 and cached == [("preload_decode", 0)] * 3 + [("cache_write", 0)] * 2
    assert len(list(indexes.glob("*/*.index.json"))) == 1


class Killed(BaseException):
    """Stands for the SIGKILL: stops a writer at its hold point (no `except Exception` catches it)."""


def kill_at(phase: str, arrival: int = 1) -> Look:
    arrivals: list[str] = []

    def look(at: str) -> None:
        arrivals.append(at)
        if at == phase and arrivals.count(phase) == arrival:
            raise Killed(phase)

    return look


@pytest.mark.parametrize("in_place", [False, True], ids=["atomic", "in-place"])
def test_the_drills_file_checks_find_what_a_writer_stopped_half_way_leaves(
    hold: Callable[[Look], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    """The drill's checks (bench/kill_files.py, bench/kill_checks.py) on what each real writer leaves
    when stopped at its hold point: nothing when it writes atomically; with each in-place switch,
    the torn file, which trips torn_samples, bad_best and bad_cache."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import kill_checks
    import kill_files

    for switch in (faults.SAMPLE_IN_PLACE_ENV, faults.BEST_IN_PLACE_ENV, faults.CACHE_IN_PLACE_ENV):
        monkeypatch.setenv(switch, "1" if in_place else "0")
    tally = kill_checks.Tally()
    run_dir = tmp_path / "run"
    write_wav(run_dir / "samples" / "step-00000002" / "01.wav", tone(), 16000)
    hold(kill_at("sample_write"))
    with pytest.raises(Killed):
        write_wav(run_dir / "samples" / "step-00000005" / "01.wav", tone(), 16000)
    kill_files.check_samples(run_dir, [], tally, "wav")
    manager = CheckpointManager(run_dir, keep_last=2)
    manager.save(state(1), 1, val_loss=2.0, is_best=True)
    hold(kill_at("best_json"))
    with pytest.raises(Killed):
        manager.save(state(2), 2, val_loss=1.0, is_best=True)
    kill_checks.check_best(run_dir, [], tally, "best")
    params, paths = feature_params(AudioSection(n_mels=8)), recordings(tmp_path / "voice", 2)
    cache = FeatureCache(tmp_path / "cache", params, tmp_path / "voice")
    cache.put(paths[0], torch.ones(8, 3))
    cache.put(paths[1], torch.ones(8, 4))
    hold(kill_at("cache_write", arrival=2))  # the index, half written
    with pytest.raises(Killed):
        cache.flush()
    kill_files.check_cache(tmp_path / "cache", tmp_path / "voice", AudioSection(), None, tally, "c")
    torn = (tally.torn_samples, tally.bad_best, tally.bad_cache)
    assert torn == ((1, 1, 1) if in_place else (0, 0, 0)), tally.messages()
    assert len(tally.checked_files) == 2 - (not in_place) and tally.caches_checked == 1
    if in_place:
        assert "RIFF header says" in tally.messages("torn_samples")[0]
        assert "best.json is torn" in tally.messages("bad_best")[0]
        assert "is damaged" in tally.messages("bad_cache")[0]
