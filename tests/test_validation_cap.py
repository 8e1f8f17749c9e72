"""data.val_max_items: validation holds at most that many items, the same ones on every start and resume.

Voice items the cap leaves out train; text windows the cap leaves out stay held out (unused). The dry-run plan
reports the validation items, the ones capped away and the estimated share of wall time spent validating.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import TRAINER_CORE
from test_text_data import _write_docs
from test_voice_dataset import TEST_VOICE, encode, features_of_lengths, varied_lengths
from trainer_core.data.text import TextCorpus
from trainer_core.data.validation_split import VAL_ITEM_COST, held_out_count, validation_share
from trainer_core.data.voice_dataset import VoiceDataset, split_items

REPO = Path(__file__).resolve().parents[1]
IDS = [f"speaker/clip_{i:05d}" for i in range(2000)]


def test_cap_keeps_the_first_items_of_the_fixed_ranking_and_the_rest_train() -> None:
    train, val = split_items(IDS, 0.1, max_items=64)
    assert len(val) == 64 and sorted(train + val) == list(range(len(IDS)))
    _, uncapped = split_items(IDS, 0.1)
    assert len(uncapped) == 200 and set(val) < set(uncapped)  # a prefix of the same ranking
    _, larger = split_items(IDS, 0.1, max_items=100)
    assert set(val) < set(larger)  # raising the cap only adds items
    # The choice depends on the names alone, not on their order.
    reversed_ids = IDS[::-1]
    assert {reversed_ids[i] for i in split_items(reversed_ids, 0.1, max_items=64)[1]} == {IDS[i] for i in val}


def test_tiny_corpora_are_unaffected_by_the_cap() -> None:
    for count in (2, 3, 40, 639):
        ids = IDS[:count]
        assert split_items(ids, 0.1, max_items=64) == split_items(ids, 0.1)
    assert held_out_count(640, 0.1, 64) == 64 and held_out_count(650, 0.1, 64) == 64
    assert held_out_count(2000, 0.1, 0) == 200  # 0: no cap


def test_voice_dataset_validates_on_the_capped_set_whatever_the_seed() -> None:
    lengths = varied_lengths(900)
    a = VoiceDataset(features_of_lengths(lengths), encode, 0.2, seed=1, val_max_items=50)
    b = VoiceDataset(features_of_lengths(lengths), encode, 0.2, seed=99, val_max_items=50)
    assert a.val_items() == 50 and a.val_capped == 180 - 50
    assert a.train_items() == 900 - 50
    assert a.val_ids == b.val_ids  # a resumed run (or one with another seed) validates on the same items
    assert not set(a.val_ids) & set(a.train_ids)
    seen = [int(i) for batch in a.val_batches(16) for i in batch["mel"][:, 0, 0].long().tolist()]
    assert sorted(seen) == sorted(a.val_ids)
    assert a.describe(8)["val_capped"] == 130


def _text(tmp_path: Path, cap: int) -> TextCorpus:
    files = _write_docs(tmp_path / "docs", 120, words=60)
    return TextCorpus.from_files(files, tmp_path / "docs", 16, 0.2, seed=3, val_max_items=cap)


def test_text_cap_evaluates_an_even_spread_of_windows_and_trains_on_nothing_held_out(tmp_path: Path) -> None:
    capped, uncapped = _text(tmp_path, 10), _text(tmp_path, 0)
    windows = uncapped.val_items()
    assert windows > 10 and capped.val_windows() == windows
    assert capped.val_items() == 10 and capped.describe()["val_capped"] == windows - 10
    assert torch.equal(capped.train, uncapped.train)  # capped-away windows stay held out
    starts = capped.val_starts()
    assert starts.tolist() == [(k * windows // 10) * 16 for k in range(10)]
    assert starts[-1] >= (windows - windows // 10 - 1) * 16  # spread to the end of the held-out text
    rows = torch.cat([batch["input"] for batch in capped.val_batches(4)])
    assert rows.shape == (10, 16) and torch.equal(rows[0], capped.val[:16].long())
    assert torch.equal(capped.val_starts(), _text(tmp_path, 10).val_starts())


def test_share_estimate_follows_items_and_interval() -> None:
    assert validation_share(0, 400) == 0.0
    assert validation_share(64, 400) == pytest.approx(64 * VAL_ITEM_COST / (400 + 64 * VAL_ITEM_COST))
    assert validation_share(2812, 400) > 0.6 > validation_share(64, 400)


def dry_run(*sets: str, config: Path) -> dict:
    argv = [*TRAINER_CORE, "train", "--profile", "demo", "--dry-run", "--json", "--data", str(TEST_VOICE)]
    argv += [arg for s in sets for arg in ("--set", s)]
    env = {**os.environ, "VEGA_CONFIG_DIR": str(config)}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_dry_run_reports_validation_items_capped_and_share(tmp_path: Path) -> None:
    cache = f"data.cache_dir={json.dumps(str(tmp_path / 'cache'))}"
    plan = dry_run("data.val_fraction=0.5", "data.val_max_items=5", "train.eval_every_steps=3", cache, config=tmp_path)
    v, usable = plan["validation"], plan["data"]["usable"]
    assert v["items"] == 5 and v["capped"] == usable // 2 - 5 and v["max_items"] == 5
    assert plan["schedule"]["steps_per_epoch"] == (usable - 5) // 8  # capped-away items train
    assert v["every_steps"] == 3 and v["interval_items"] == 3 * 8
    assert v["estimated_share"] == pytest.approx(validation_share(5, 24))
    assert "estimate" in v
    uncapped = dry_run(
        "data.val_fraction=0.5", "data.val_max_items=0", "train.eval_every_steps=3", cache, config=tmp_path
    )["validation"]
    assert uncapped["items"] == usable // 2 and uncapped["capped"] == 0
    assert uncapped["estimated_share"] > v["estimated_share"]
