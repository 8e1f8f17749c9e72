"""model.size = "auto": real calibration of real models on this machine, and the rule that picks a shape."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import TEST_VOICE, TRAINER_CORE, write_corpus
from trainer_core.contract.profile_loader import load_profile_dict
from trainer_core.data.scan import scan_data
from trainer_core.models.size_probes import LmProbe, TtsProbe
from trainer_core.models.sizing import LADDER, TOKENS_PER_PARAMETER, choose_size, effective_tokens
from trainer_core.tiny_profiles import tiny_sections

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def lm_probe(tmp_path: Path, documents: int = 6):
    corpus = write_corpus(tmp_path / "text", documents=documents)
    profile = load_profile_dict(tiny_sections("lm", data={"path": str(corpus), "context_bytes": 32}))
    return LmProbe(profile, scan_data(corpus, mode="text"), CPU)


def test_the_chosen_shape_is_the_largest_that_sees_twenty_tokens_per_parameter(tmp_path: Path) -> None:
    # about 3 MB: the smallest shape sees ~17x its 20 tokens per parameter, so a loaded machine still fits one
    probe = lm_probe(tmp_path, documents=1000)
    choice = choose_size(probe, budget_s=1000.0, device=CPU)
    chosen, measured = choice.chosen, choice.candidates
    assert [c.shape for c in measured] == list(LADDER[: len(measured)])
    assert all(a.parameters < b.parameters for a, b in zip(measured, measured[1:], strict=False))
    fitting = [c for c in measured if c.tokens_per_parameter >= TOKENS_PER_PARAMETER]
    assert fitting and chosen == fitting[-1]
    assert measured[-1].tokens_per_parameter < TOKENS_PER_PARAMETER or measured[-1].shape == LADDER[-1]
    assert f"hidden {chosen.shape.hidden}" in choice.reason() and "the largest that sees" in choice.reason()


def test_a_budget_too_short_for_any_shape_takes_the_smallest_and_says_so(tmp_path: Path) -> None:
    choice = choose_size(lm_probe(tmp_path, documents=200), budget_s=2.0, device=CPU)
    assert choice.chosen.shape == LADDER[0] and len(choice.candidates) == 1
    assert choice.chosen.tokens_per_parameter < TOKENS_PER_PARAMETER and "the smallest" in choice.reason()


def test_repeated_data_is_worth_less_than_new_data() -> None:
    assert effective_tokens(500.0, 1000) == 500.0
    assert effective_tokens(4000.0, 1000) == pytest.approx(1000 * (1 + 15.4 * (1 - math.exp(-3 / 15.4))))
    assert 3.6 < effective_tokens(4000.0, 1000) / 1000 < 4.0, "four epochs are worth nearly four"
    assert effective_tokens(1e9, 1000) < 16.5 * 1000, "endless repeats are worth at most 1 + R* corpora"


def test_a_small_corpus_keeps_the_model_small(tmp_path: Path) -> None:
    probe = lm_probe(tmp_path, documents=1)
    choice = choose_size(probe, budget_s=600.0, device=CPU)
    assert all(c.useful_tokens < 16.5 * probe.corpus_tokens for c in choice.candidates)
    assert choice.chosen.shape == LADDER[0] and "epochs of the corpus" in choice.reason()


def test_the_voice_probe_times_the_acoustic_model_on_the_demo_voice() -> None:
    profile = load_profile_dict(tiny_sections("tts", data={"path": str(TEST_VOICE)}))
    report = scan_data(TEST_VOICE, mode="voice")
    probe = TtsProbe(profile, report, CPU)
    assert probe.corpus_tokens > 40 * 50 and probe.unit == "mel frames"
    choice = choose_size(probe, budget_s=10.0, device=CPU)
    assert choice.chosen.parameters > 0 and choice.chosen.step_s > 0


def dry_run(tmp_path: Path, *sets: str) -> subprocess.CompletedProcess:
    corpus = write_corpus(tmp_path / "text", documents=20)
    argv = [*TRAINER_CORE, "train", "--profile", "lm-small", "--data", str(corpus), "--dry-run", "--json"]
    argv += [arg for s in ['compute.mode="cpu"', *sets] for arg in ("--set", s)]
    env = {**os.environ, "VEGA_CONFIG_DIR": str(tmp_path / "config"), "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


def test_the_dry_run_shows_the_chosen_size_and_why(tmp_path: Path) -> None:
    done = dry_run(tmp_path, 'model.size="auto"', "train.target_hours=0.002", "data.context_bytes=32")
    assert done.returncode == 0, done.stderr[-2000:]
    model = json.loads(done.stdout)["model"]
    assert model["size"]["chosen"]["hidden"] == model["hidden"]
    assert "per parameter" in model["size"]["reason"] and len(model["size"]["candidates"]) >= 1
    # lm-small's learning rate (6e-4 at hidden 256) moved to the chosen width, as muP has it.
    assert model["size"]["lr"] == pytest.approx(6e-4 * 256 / model["hidden"])
    # The launch screen's preflight shows the same plan: the size and why.
    from trainer_core.contract.plan_report import PlanReport
    from vega_tui.widgets.preflight import plan_rows

    shown = dict(plan_rows(PlanReport.model_validate_json(done.stdout)))["model"]
    assert f"hidden {model['hidden']}" in str(shown) and model["size"]["reason"] in str(shown)


def test_auto_size_without_a_time_budget_is_a_clear_error(tmp_path: Path) -> None:
    done = dry_run(tmp_path, 'model.size="auto"')
    assert done.returncode == 2
    assert "train.target_hours" in done.stderr and 'model.size = "auto"' in done.stderr


def test_a_resumed_run_keeps_the_size_it_was_started_with(tmp_path: Path) -> None:
    from trainer_core.contract.profile_loader import profile_to_toml
    from trainer_core.plan import auto_size
    from trainer_core.world import SINGLE

    corpus = write_corpus(tmp_path / "text")
    started = load_profile_dict(tiny_sections("lm", model={"hidden": 48, "heads": 3, "dropout": 0.0}))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "profile.toml").write_text(profile_to_toml(started), encoding="utf-8")
    asked = load_profile_dict(tiny_sections("lm", model={"size": "auto"}, train={"target_hours": 1.0}))
    resumed, size = auto_size(asked, scan_data(corpus, mode="text"), "cpu", SINGLE, tmp_path / "run")
    assert (resumed.model.hidden, resumed.model.heads, resumed.model.dropout) == (48, 3, 0.0)
    assert resumed.train.lr == started.train.lr and resumed.model.size == "fixed"
    assert size is not None and "run" in size["reason"]
