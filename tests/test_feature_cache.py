"""The packed feature cache: hits and misses, changed/added/removed recordings, damage, atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.feature_cache import ORPHAN_AGE_S, FeatureCache, feature_params, params_digest

PARAMS = feature_params(AudioSection(n_mels=8))


def corpus(folder: Path, names: list[str]) -> list[Path]:
    """Stand-in recordings: the cache keys on path, size and mtime, it never reads the audio."""
    folder.mkdir(exist_ok=True)
    paths = [folder / f"{name}.wav" for name in names]
    for path in paths:
        path.write_bytes(path.name.encode() * 10)
    return paths


def mel_for(i: int, frames: int = 5) -> torch.Tensor:
    return torch.arange(8 * frames, dtype=torch.float32).reshape(8, frames) + 1000 * i


def filled(tmp_path: Path, names: list[str]) -> tuple[FeatureCache, list[Path]]:
    paths = corpus(tmp_path / "voice", names)
    cache = FeatureCache(tmp_path / "cache", PARAMS, tmp_path / "voice")
    for i, path in enumerate(paths):
        cache.put(path, mel_for(i, frames=3 + i))
    assert cache.flush()
    return cache, paths


def reopened(tmp_path: Path) -> FeatureCache:
    return FeatureCache(tmp_path / "cache", PARAMS, tmp_path / "voice")


def test_features_come_back_exactly_from_one_index_and_one_data_file(tmp_path: Path) -> None:
    cold = FeatureCache(tmp_path / "cache", PARAMS, tmp_path / "voice")
    paths = corpus(tmp_path / "voice", ["a", "b", "c"])
    assert cold.get(paths[0]) is None and cold.frames(paths[0]) is None
    cache, paths = filled(tmp_path, ["a", "b", "c"])
    warm = reopened(tmp_path)
    for i, path in enumerate(paths):
        assert warm.frames(path) == 3 + i
        torch.testing.assert_close(warm.get(path), mel_for(i, frames=3 + i), rtol=0, atol=0)
    files = sorted(p.name for p in warm.entries_dir.iterdir())
    assert files == sorted([warm.index_path.name, warm.data_path.name]) and warm.data_path.suffix == ".f32"
    assert warm.data_path.stat().st_size == 4 * 8 * (3 + 4 + 5) and warm.warnings == []
    # Views of a copy-on-write mapping: writing to one never reaches the file.
    warm.get(paths[1]).fill_(-1.0)
    again = reopened(tmp_path).get(paths[1])
    torch.testing.assert_close(again, mel_for(1, frames=4), rtol=0, atol=0)


def test_changed_added_and_removed_recordings(tmp_path: Path) -> None:
    _, paths = filled(tmp_path, ["a", "b", "c"])
    stat = paths[0].stat()
    os.utime(paths[0], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # changed: same size, newer
    paths[1].unlink()  # removed
    added = corpus(tmp_path / "voice", ["d"])[0]
    cache = reopened(tmp_path)
    assert cache.get(paths[0]) is None and cache.get(paths[1]) is None and cache.get(added) is None
    assert cache.frames(paths[2]) == 5
    cache.put(paths[0], mel_for(7, frames=2))
    cache.put(added, mel_for(8, frames=6))
    old_data = cache.data_path
    assert cache.flush()
    assert not old_data.exists()  # the replaced data file is removed
    after = reopened(tmp_path)
    index = json.loads(after.index_path.read_text())
    assert sorted(Path(key).name for key in index["entries"]) == ["a.wav", "c.wav", "d.wav"]
    torch.testing.assert_close(after.get(paths[0]), mel_for(7, frames=2), rtol=0, atol=0)
    torch.testing.assert_close(after.get(paths[2]), mel_for(2, frames=5), rtol=0, atol=0)
    torch.testing.assert_close(after.get(added), mel_for(8, frames=6), rtol=0, atol=0)


def test_an_unchanged_cache_is_not_rewritten(tmp_path: Path) -> None:
    cache, paths = filled(tmp_path, ["a", "b"])
    before = (cache.index_path.stat().st_mtime_ns, cache.data_path)
    again = reopened(tmp_path)
    assert all(again.get(p) is not None for p in paths) and again.flush()
    assert (again.index_path.stat().st_mtime_ns, again.data_path) == before


@pytest.mark.parametrize("damage", ["garbage index", "truncated index", "truncated data", "missing data"])
def test_a_damaged_cache_warns_misses_and_is_rebuilt(tmp_path: Path, damage: str, caplog) -> None:
    cache, paths = filled(tmp_path, ["a", "b", "c"])
    if damage == "garbage index":
        cache.index_path.write_bytes(os.urandom(300))
    elif damage == "truncated index":
        cache.index_path.write_bytes(cache.index_path.read_bytes()[:40])
    elif damage == "truncated data":
        cache.data_path.write_bytes(cache.data_path.read_bytes()[:50])
    else:
        cache.data_path.unlink()
    broken = reopened(tmp_path)
    assert [broken.get(p) for p in paths] == [None, None, None]
    assert len(broken.warnings) == 1 and "computed again" in broken.warnings[0]
    assert "computed again" in caplog.text
    for i, path in enumerate(paths):
        broken.put(path, mel_for(i, frames=3 + i))
    assert broken.flush()
    healed = reopened(tmp_path)
    assert healed.warnings == [] and all(healed.get(p) is not None for p in paths)
    assert all(p.read_bytes() == p.name.encode() * 10 for p in paths)  # the audio is never touched


def test_an_entry_pointing_outside_the_data_file_is_a_miss_the_others_hit(tmp_path: Path) -> None:
    cache, paths = filled(tmp_path, ["a", "b", "c"])
    index = json.loads(cache.index_path.read_text())
    index["entries"][os.path.abspath(paths[1])][2] = 10**6  # offset past the end
    index["entries"][os.path.abspath(paths[2])] = "nonsense"
    cache.index_path.write_text(json.dumps(index))
    damaged = reopened(tmp_path)
    assert damaged.get(paths[0]) is not None and damaged.get(paths[1]) is None and damaged.get(paths[2]) is None
    assert damaged.corrupt_entries == 2


def test_another_format_version_or_the_old_npy_layout_is_ignored(tmp_path: Path) -> None:
    cache, paths = filled(tmp_path, ["a"])
    index = json.loads(cache.index_path.read_text())
    cache.index_path.write_text(json.dumps({**index, "format_version": 1}))
    assert reopened(tmp_path).get(paths[0]) is None
    # Version 1 kept one .npy per recording under a digest of its own: never read, never removed.
    old_folder = tmp_path / "cache" / "0123456789abcdef0123"
    old_folder.mkdir()
    np.save(old_folder / "entry.npy", np.zeros((8, 3), np.float32))
    fresh = reopened(tmp_path)
    fresh.put(paths[0], mel_for(0))
    assert fresh.flush() and (old_folder / "entry.npy").is_file()
    assert fresh.entries_dir.name == params_digest(PARAMS) != old_folder.name


def test_writes_are_atomic_and_leftovers_of_interrupted_writes_are_cleared(tmp_path: Path) -> None:
    cache, paths = filled(tmp_path, ["a", "b"])
    reader = reopened(tmp_path)
    # An interrupted writer leaves a temporary index and an unreferenced data file: readers never see them.
    stale_temp = cache.entries_dir / f".{cache.index_path.name}.abc.tmp"
    stale_temp.write_text("{half an ind")
    orphan = cache.entries_dir / f"{cache.name}.deadbeef.f32"
    orphan.write_bytes(b"\0" * 64)
    assert reopened(tmp_path).get(paths[0]) is not None
    old = os.path.getmtime(orphan) - ORPHAN_AGE_S - 10
    for path in (stale_temp, orphan):
        os.utime(path, (old, old))
    writer = reopened(tmp_path)
    writer.put(paths[0], mel_for(5))
    assert writer.flush()
    assert not stale_temp.exists() and not orphan.exists()
    assert sorted(p.name for p in writer.entries_dir.iterdir()) == sorted(
        [writer.index_path.name, writer.data_path.name]
    )
    # The reader opened before the rewrite still maps the replaced (now unlinked) file and reads it whole.
    torch.testing.assert_close(reader.get(paths[0]), mel_for(0, frames=3), rtol=0, atol=0)


def test_an_unwritable_folder_keeps_features_in_memory_and_reports_it(tmp_path: Path) -> None:
    paths = corpus(tmp_path / "voice", ["a"])
    not_a_folder = tmp_path / "cache-is-a-file"
    not_a_folder.write_text("x")
    cache = FeatureCache(not_a_folder, PARAMS, tmp_path / "voice")
    cache.put(paths[0], mel_for(0))
    assert cache.flush() is False
    torch.testing.assert_close(cache.get(paths[0]), mel_for(0), rtol=0, atol=0)
    assert not_a_folder.read_text() == "x"


def test_nan_in_the_data_file_is_a_miss_with_a_warning_not_a_feature(tmp_path: Path) -> None:
    """Bit rot keeps the file's size: a block holding NaN is dropped and computed again."""
    cache, paths = filled(tmp_path, ["a", "b"])
    data = bytearray(cache.data_path.read_bytes())
    data[4 * 8 * 3 : 4 * 8 * 3 + 4] = np.float32("nan").tobytes()  # the first value of b's block
    cache.data_path.write_bytes(bytes(data))
    warm = reopened(tmp_path)
    torch.testing.assert_close(warm.get(paths[0]), mel_for(0, frames=3), rtol=0, atol=0)
    assert warm.get(paths[1]) is None and warm.frames(paths[1]) is None  # a miss from then on
    assert len(warm.warnings) == 1 and "holds NaN or infinite values" in warm.warnings[0]
    assert str(paths[1]) in warm.warnings[0] and warm.corrupt_entries == 1
    warm.put(paths[1], mel_for(1, frames=4))
    assert warm.flush()
    again = reopened(tmp_path).get(paths[1])
    torch.testing.assert_close(again, mel_for(1, frames=4), rtol=0, atol=0)
