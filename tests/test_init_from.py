"""Starting from an existing voice (`train --init-from PATH`, `train.init_from`): real tiny runs, real files.

A tiny voice run and a tiny LM run on real data are the sources; each test starts from one of them through the
command line's entry point, in this process (or, for the weight-level rules, through the engine's own functions on
real models).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from textual.pilot import Pilot

from conftest import TEST_VOICE, of_type, run_here, set_args, tiny_voice_profile, write_corpus
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.init_sources import InitSourceError, check_compatible, resolve_source
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.contract.profile_loader import load_profile
from trainer_core.engine.export import export_model
from trainer_core.engine.init_from import apply_init, export_prefix, name_rows, symbol_rows
from trainer_core.engine.model_source import load_model_source
from trainer_core.models.gan_vocoder import GanVocoder, VocoderConfig
from trainer_core.models.text_frontend import TextEncoder
from trainer_core.models.tts import AcousticModel, build_tts_model
from trainer_core.models.tts_config import TtsConfig
from trainer_core.tiny_profiles import tiny_profile

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SOURCE_STEPS = 6
OWN = {"mel_mean", "mel_std", "text_symbols", "text_phonemes"}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("init-from")
    (folder / "config").mkdir()
    return folder


@pytest.fixture(scope="module")
def env(root: Path) -> dict[str, str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("VEGA_")}
    return {**clean, "VEGA_CONFIG_DIR": str(root / "config"), "OMP_NUM_THREADS": "1"}


def voice_profile(root: Path, name: str) -> Path:
    """A tiny voice profile on the demo corpus (validations every 2 steps) in ROOT/profiles, features cached there."""
    path = root / "profiles" / f"{name}.toml"
    path.parent.mkdir(exist_ok=True)
    text = tiny_voice_profile(name, SOURCE_STEPS, 2, ["Hello."])
    # No free-running evaluation at the end: these runs are about the weights they start from.
    path.write_text(text.replace("[train]\n", "[train]\nfree_running_every = 0\n"), encoding="utf-8")
    return path


def train(
    env: dict[str, str], profile: Path, run_dir: Path | None, *args: str, settings: dict[str, object] | None = None
) -> tuple[int, str]:
    """`trainer-core train` in this process: (exit status, stderr); `settings` become `--set` items."""
    where = ["--run-dir", str(run_dir)] if run_dir is not None else []
    done = run_here(env, "train", "--profile", str(profile), *where, *args, *set_args(settings or {}))
    return done.returncode, done.stderr


def dry_run(env: dict[str, str], profile: Path, *args: str) -> dict:
    done = run_here(env, "train", "--profile", str(profile), *args, "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def voice_run(root: Path, env: dict[str, str]) -> Path:
    """A finished tiny voice run: checkpoints, best.json and an export."""
    run = root / "runs" / "voice-src"
    code, err = train(env, voice_profile(root, "voice-src"), run)
    assert code == 0, err[-3000:]
    return run


@pytest.fixture(scope="module")
def lm_run(root: Path, env: dict[str, str]) -> Path:
    """A finished tiny byte-level LM run: the wrong kind for a voice."""
    corpus = write_corpus(root / "text", documents=3, lines=30)
    profile = root / "profiles" / "lm-src.toml"
    profile.parent.mkdir(exist_ok=True)
    profile.write_text(tiny_profile("lm", train={"max_steps": 8, "warmup_steps": 2}), encoding="utf-8")
    run = root / "runs" / "lm-src"
    code, err = train(env, profile, run, "--data", str(corpus))
    assert code == 0, err[-3000:]
    return run


def validation_losses(run: Path) -> dict[int, float]:
    return {e.step: e.loss for e in of_type(read_all(run / "events.jsonl"), "validation")}


@pytest.fixture(scope="module")
def started_run(root: Path, env: dict[str, str], voice_run: Path) -> Path:
    """A voice run started from the source run folder: validated before its first step, then one step."""
    run = root / "runs" / "started"
    settings = {"train.validate_at_start": True, "train.max_steps": 1, "train.warmup_steps": 0}
    code, err = train(env, voice_profile(root, "started"), run, "--init-from", str(voice_run), settings=settings)
    assert code == 0, err[-3000:]
    return run


# ------------------------------------------------------------------------------------------- whole runs


def test_a_run_folder_source_gives_the_new_run_the_voice_it_ended_with(started_run: Path, voice_run: Path) -> None:
    events = read_all(started_run / "events.jsonl")
    first_life = events[: next(i for i, e in enumerate(events) if e.type == "finished")]
    (init,) = of_type(first_life, "init_from")
    assert (init.source, init.path, init.form) == (str(voice_run), str(voice_run / "export"), "export")
    assert init.kind == "tts"
    assert init.step == SOURCE_STEPS and init.skipped == 0 and init.new == 0 and init.loaded > 20
    assert [(m.name, m.by, m.kept == m.rows) for m in init.mapped] == [("embedding.weight", "symbol", True)]
    assert set(init.own) >= OWN
    kinds = [e.type for e in first_life]
    assert kinds.index("init_from") < kinds.index("validation") < kinds.index("step")
    # Same data, so the same recomputed mel statistics: before any step it validates as the source ended.
    assert validation_losses(started_run)[0] == pytest.approx(validation_losses(voice_run)[SOURCE_STEPS], rel=1e-5)
    frozen = load_profile(started_run / "profile.toml", machine_file=None)
    assert frozen.train.init_from == voice_run  # the flag is recorded in the run's own profile
    log = (started_run / "trainer.log").read_text(encoding="utf-8")
    assert "started from run voice-src: its export:" in log and "embedding.weight 97/97 symbols kept" in log


def test_a_resumed_run_keeps_its_checkpoint_and_does_not_start_from_the_source_again(
    started_run: Path, env: dict[str, str], voice_run: Path
) -> None:
    before = len(read_all(started_run / "events.jsonl"))
    profile = started_run / "profile.toml"  # carries train.init_from, as the dashboard's resume uses it
    code, err = train(env, profile, started_run, "--resume", "auto", settings={"train.max_steps": 2})
    assert code == 0, err[-3000:]
    later = read_all(started_run / "events.jsonl")[before:]
    assert later[0].type == "hello" and later[0].resumed
    assert of_type(later, "init_from") == [] and of_type(later, "finished")[-1].step == 2
    log = (started_run / "trainer.log").read_text(encoding="utf-8")
    assert f"train.init_from ({voice_run}) is not applied: the run resumed from its own checkpoint" in log
    assert dry_run(env, profile, "--run-dir", str(started_run), "--resume", "auto")["init_from"]["applied"] is False


def test_a_different_corpus_keeps_the_shared_symbols_and_recomputes_its_mel_statistics(
    root: Path, env: dict[str, str], voice_run: Path
) -> None:
    corpus = other_alphabet_corpus(root / "other-voice")
    run = root / "runs" / "other"
    settings = {"train.max_steps": 1, "train.warmup_steps": 0}
    args = ("--init-from", str(voice_run), "--data", str(corpus))
    code, err = train(env, voice_profile(root, "other"), run, *args, settings=settings)
    assert code == 0, err[-3000:]
    (init,) = of_type(read_all(run / "events.jsonl"), "init_from")
    (table,) = init.mapped
    assert (table.kept, table.rows) == (97, 99)  # the base set and both specials; ä and ш start fresh
    source_stats = load_model_source(voice_run).mel_mean
    exported = load_model_source(run / "export")
    assert exported.symbols[-2:] == [ord("ä"), ord("ш")]
    assert not torch.equal(exported.mel_mean, source_stats)  # computed on the louder copy, not copied


def other_alphabet_corpus(folder: Path) -> Path:
    """16 demo recordings, 1.5 times louder, with transcripts that spell 'a' as 'ä' and 'sh' as 'ш'."""
    import soundfile

    (folder / "wavs").mkdir(parents=True)
    rows = []
    for line in (TEST_VOICE / "metadata.csv").read_text(encoding="utf-8").splitlines()[:16]:
        item, text, normalized = line.split("|")
        audio, rate = soundfile.read(str(TEST_VOICE / "wavs" / f"{item}.wav"))
        soundfile.write(str(folder / "wavs" / f"{item}.wav"), audio * 1.5, rate)
        rows.append("|".join([item, *(t.replace("sh", "ш").replace("a", "ä") for t in (text, normalized))]))
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------------------- refusals


def test_a_source_of_another_model_kind_is_refused_naming_both(root: Path, env: dict[str, str], lm_run: Path) -> None:
    run = root / "runs" / "refused-kind"
    code, err = train(env, voice_profile(root, "refused-kind"), run, "--init-from", str(lm_run))
    assert code == 2, err
    assert f"train.init_from: {lm_run} holds a 'lm' model, but this run trains a 'tts' model" in err
    assert not run.exists()  # refused by the plan, before any work


def test_other_audio_features_are_refused_naming_each_value(
    root: Path, env: dict[str, str], voice_run: Path, tmp_path: Path
) -> None:
    profile = voice_profile(root, "refused-audio")
    code, err = train(env, profile, None, "--init-from", str(voice_run), "--dry-run", settings={"audio.n_mels": 64})
    assert code == 2, err
    assert f"train.init_from: {voice_run} was trained on other audio features" in err
    assert "audio.n_mels: 80 in the source, 64 in this run" in err
    # A checkpoint outside any run folder says what it is only when loaded: the trainer checks it at set-up.
    lone = tmp_path / "lone.pt"
    shutil.copy(voice_run / "checkpoints" / f"step-{SOURCE_STEPS:08d}.pt", lone)
    code, err = train(env, profile, tmp_path / "run", "--init-from", str(lone), settings={"audio.f_max": 7000})
    assert code == 2, err
    assert f"train.init_from: {lone} was trained on other audio features (audio.f_max: 8000.0 in the source, " in err


def test_resume_with_init_from_is_an_error(root: Path, env: dict[str, str], voice_run: Path) -> None:
    args = ("--resume", "auto", "--init-from", str(voice_run))
    code, err = train(env, voice_profile(root, "both"), root / "runs" / "both", *args)
    assert code == 2
    assert f"--resume auto and --init-from {voice_run} together" in err and "pass one of them" in err


def test_the_profile_field_is_relative_to_its_file_and_the_plan_says_what_it_loads(
    root: Path, env: dict[str, str], voice_run: Path
) -> None:
    profile = voice_profile(root, "relative")  # in ROOT/profiles: the field names ROOT/runs/voice-src
    text = profile.read_text(encoding="utf-8").replace("[train]\n", '[train]\ninit_from = "../runs/voice-src"\n')
    profile.write_text(text, encoding="utf-8")
    assert load_profile(profile, machine_file=None).train.init_from == voice_run
    start = dry_run(env, profile)["init_from"]
    assert start["applied"] and start["path"] == str(voice_run / "export") and start["kind"] == "tts"
    assert start["text"] == f"run voice-src: its export (tts, step {SOURCE_STEPS}); optimizer and schedule fresh"
    done = run_here(env, "train", "--profile", str(profile), "--dry-run")
    assert "start from" in done.stdout and "run voice-src: its export" in done.stdout
    missing = root / "runs" / "no-such-run"
    done = run_here(env, "train", "--profile", str(profile), "--init-from", str(missing), "--dry-run")
    assert done.returncode == 2
    assert f"error: train.init_from: {missing} does not exist" in done.stderr


# ------------------------------------------------------------------------------------------- weight rules


def fresh_target(source_profile: Path, codes: list[int], seed: int) -> AcousticModel:
    profile = load_profile(source_profile, machine_file=None)
    return build_tts_model(TtsConfig.from_profile(profile, len(codes)), seed, codes)


def test_each_source_form_loads_the_weights_it_names(voice_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "no-export"
    shutil.copytree(voice_run, copy, ignore=shutil.ignore_patterns("export"))
    older = "step-00000004.pt"  # saved at the end of the first epoch; made the best below
    (copy / "checkpoints" / "best.json").write_text(json.dumps({"step": 4, "path": older, "val_loss": 1.0}))
    forms = {
        voice_run: voice_run / "export",
        voice_run / "export": voice_run / "export",
        copy: copy / "checkpoints" / older,
        voice_run / "checkpoints" / older: voice_run / "checkpoints" / older,
    }
    for given, expected in forms.items():
        assert resolve_source(given).path == expected, given
    (copy / "checkpoints" / "best.json").unlink()
    forms[copy] = copy / "checkpoints" / f"step-{SOURCE_STEPS:08d}.pt"  # no best: the newest
    assert resolve_source(copy).path == forms[copy]
    for given, expected in forms.items():
        source = load_model_source(given)
        assert source.kind == "tts" and source.audio is not None and source.audio["n_mels"] == 80
        assert source.symbols is not None and source.symbols[:2] == [-1, -1] and not source.phonemes
        target = fresh_target(voice_run / "profile.toml", source.symbols, seed=99)
        own = {name: tensor.clone() for name, tensor in target.state_dict().items() if name in OWN}
        report = apply_init(target, source)
        state = target.state_dict()
        for name in report.loaded + [m.name for m in report.mapped]:
            assert torch.equal(state[name], source.weights[name]), (given, name)
        assert all(torch.equal(state[name], value) for name, value in own.items())  # never taken from the source
        assert set(report.own) == OWN and not report.skipped and not report.new, given
        assert report.event().path == str(expected)


def test_the_text_embedding_moves_by_symbol_and_new_symbols_start_fresh(tmp_path: Path) -> None:
    source_encoder = TextEncoder.build(["þe þin paþ"], "chars")  # the source's corpus spells 'th' as 'þ'
    target_encoder = TextEncoder.build(["ä wärm ш"], "chars")  # this corpus has 'ä' and 'ш' instead
    hidden = 16
    config = TtsConfig(source_encoder.vocab_size, 80, hidden, 1, 1, 2, 2, 0.0)
    source_model = build_tts_model(config, 1, source_encoder.symbol_codes())
    model_config = {"kind": "tts", "text": source_encoder.state_dict(), "audio": AudioSection().model_dump(mode="json")}
    export_model(source_model, model_config, tmp_path / "export")
    target_config = TtsConfig(target_encoder.vocab_size, 80, hidden, 1, 1, 2, 2, 0.0, postnet_layers=1)
    target = build_tts_model(target_config, 2, target_encoder.symbol_codes())
    fresh = target.embedding.weight.detach().clone()

    report = apply_init(target, load_model_source(tmp_path / "export"))

    learned, rows = source_model.embedding.weight.detach(), target.embedding.weight.detach()
    for index, symbol in enumerate(target_encoder.symbols):
        if symbol in source_encoder.symbols:  # specials, the base set: the learned row, wherever it sat
            assert torch.equal(rows[index], learned[source_encoder.symbols.index(symbol)]), symbol
        else:
            assert torch.equal(rows[index], fresh[index]), symbol
    assert source_encoder.symbols[97] == "þ" and target_encoder.symbols[97] == "ä"  # same row, other symbols
    assert not torch.equal(rows[97], learned[97])
    (table,) = report.mapped
    assert (table.name, table.kept, table.rows, table.by) == ("embedding.weight", 97, 99, "symbol")
    assert report.new and all(name.startswith("postnet.") for name in report.new)  # only the target has one
    assert target.text_symbols.tolist() == target_encoder.symbol_codes()


def test_a_vocoder_export_fills_the_generator_and_leaves_the_discriminators_fresh(tmp_path: Path) -> None:
    config = VocoderConfig(channels=16, blocks=1, discriminator_channels=4, periods=(2,), resolutions=((256, 64, 256),))
    torch.manual_seed(1)
    trained = GanVocoder(config)
    audio = AudioSection().model_dump(mode="json")
    export_model(trained.generator, {"kind": "vocoder", "vocoder": config.to_dict(), "audio": audio}, tmp_path / "v")
    torch.manual_seed(2)
    target = GanVocoder(config)
    discriminators = {name: t.clone() for name, t in target.discriminators.state_dict().items()}

    report = apply_init(target, load_model_source(tmp_path / "v"), export_prefix(target, target.generator))

    generator = trained.generator.state_dict()
    assert sorted(report.loaded) == sorted(f"generator.{name}" for name in generator)
    assert all(torch.equal(t, generator[name]) for name, t in target.generator.state_dict().items())
    assert all(torch.equal(t, discriminators[name]) for name, t in target.discriminators.state_dict().items())
    assert sorted(report.new) == sorted(f"discriminators.{name}" for name in discriminators) and not report.skipped


def test_rows_follow_symbols_and_speaker_names_not_positions() -> None:
    pad_unk = [-1, -1]
    assert symbol_rows([*pad_unk, ord("b"), ord("x")], [*pad_unk, ord("a"), ord("b")]) == {0: 0, 1: 1, 2: 3}
    assert symbol_rows([*pad_unk, ord("a")], [-1, ord("a")]) == {0: 0, 2: 1}  # a special only where both have one
    assert name_rows(["bob", "new", "amy"], ["amy", "bob"]) == {0: 1, 2: 0}


def test_a_checkpoint_of_another_kind_outside_a_run_folder_is_refused_when_loaded(lm_run: Path, tmp_path: Path) -> None:
    lone = tmp_path / "lm.pt"
    shutil.copy(sorted((lm_run / "checkpoints").glob("step-*.pt"))[-1], lone)
    source = load_model_source(lone)
    assert source.kind == "lm" and source.audio is None and source.symbols is None
    with pytest.raises(InitSourceError, match=f"{lone} holds a 'lm' model, but this run trains a 'tts' model"):
        check_compatible(str(lone), source.kind, source.audio, "tts", {})


# ------------------------------------------------------------------------------------------- dashboard


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


@pytest.mark.anyio
async def test_the_launch_screen_offers_finished_runs_of_the_kind_to_start_from(
    root: Path, voice_run: Path, lm_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vega_tui.app import VegaApp
    from vega_tui.screens.launch import LaunchScreen
    from vega_tui.widgets.choice_list import ChoiceList
    from vega_tui.widgets.preflight import PreflightPanel
    from vega_tui.widgets.profile_list import ProfileList

    config = root / "launch-config"
    (config / "profiles").mkdir(parents=True, exist_ok=True)
    profile = voice_profile(root, "launch").read_text(encoding="utf-8")
    profile = profile.replace("[run]\n", f"[run]\nruns_dir = {json.dumps(str(root / 'runs'))}\n")
    cache = json.dumps(str(root / "profiles" / "cache"))
    (config / "profiles" / "launch.toml").write_text(profile.replace('"cache"', cache), encoding="utf-8")
    monkeypatch.setenv("VEGA_CONFIG_DIR", str(config))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: "launch" in profiles.entries, "the launch profile")
        profiles.select("launch")
        start_from = screen.query_one("#start-from", ChoiceList)
        await wait_until(pilot, lambda: str(voice_run) in {c.value for c in start_from.choices}, "the voice run")
        labels = {choice.value: (choice.label, choice.detail) for choice in start_from.choices}
        assert labels["scratch"][0] == "nothing (from scratch)" and str(lm_run) not in labels  # an LM: other kind
        assert labels[str(voice_run)] == ("voice-src", f"finished · export · step {SOURCE_STEPS}")
        assert start_from.select(str(voice_run))
        await wait_until(pilot, lambda: screen.plan is not None and screen.plan.init_from, "the plan with it")
        assert "start from run voice-src: its export (tts, step 6)" in screen.query_one(PreflightPanel).text
        argv = screen.selection.argv(root / "runs" / "next", dry_run=False)
        assert argv[argv.index("--init-from") + 1] == str(voice_run)


@pytest.mark.anyio
async def test_the_run_dashboard_says_what_the_run_started_from(started_run: Path) -> None:
    from textual.widgets import Static

    from vega_tui.app import VegaApp
    from vega_tui.screens.run import RunScreen

    headline = "started from voice-src (export): "
    app = VegaApp(start="attach", run_dir=started_run)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.state.init_from, "the event")
        screen = app.screen
        assert isinstance(screen, RunScreen)
        logs = [line.message for line in screen.state.logs if line.kind == "init_from"]
        assert logs and logs[0].startswith(headline) and "embedding 97/97 symbols kept, 0 skipped, 0 new" in logs[0]
        await pilot.press("3")
        info = screen.query_one("#ckpt-info", Static)
        await wait_until(pilot, lambda: headline in info.content.plain, "the checkpoints panel line")
        assert "embedding 97/97 symbols kept, 0 skipped, 0 new" in info.content.plain
