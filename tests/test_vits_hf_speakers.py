"""A one-speaker transformers VITS (an MMS voice) fine-tuned on a corpus of several speakers (Common Voice's
client_id as the speaker, data.speakers = "column"): the run adds speaker layers (the speaker table and every
conditioning layer, zero-initialised), so before any step each speaker says exactly what the source says; a step
trains them; the plan and the init_from report say so. Exported with `export --hf`, transformers loads the
multi-speaker voice and speaks each speaker as Vega does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from conftest import of_type
from corpus_builders import common_voice_folder
from hf_reference import make_folder, transformers_speech, vega_speech
from trainer_core.cli import main
from trainer_core.contract import rundir
from trainer_core.contract.eventlog import EventWriter, read_all
from trainer_core.contract.hf_voice import read_hf_voice
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.events import EventHub
from trainer_core.engine.export import export_model
from trainer_core.engine.setup import build_trainer, load_start_source, start_model
from trainer_core.engine.vits_init import CONDITIONING, SPEAKER_TABLE
from trainer_core.models.vits.hf_folder import load_hf_generator
from trainer_core.plan import make_plan

SAME = 1e-5  # the new layers add exact zeros: only summation order may differ
TOLERANCE = 1e-4  # Vega against transformers, as in test_vits_hf.py
IDS = [0, 26, 0, 29, 0, 5, 0, 19, 0, 7, 0, 8, 0, 33, 0]  # "and est" with blanks between symbols
FAST = {
    # One thread: on a busy two-core machine, two spin-waiting threads made a step 10 times slower.
    "compute.mode": "cpu", "compute.num_threads": 1, "train.batch_size": 2, "vits.segment_size": 512,
    "vits.discriminator_channels": 2, "vits.discriminator_warmup_steps": 0, "vits.speaker_channels": 6,
    "data.speakers": "column", "data.val_max_items": 2,
}  # fmt: skip


def new_run(tmp_path: Path, source: Path, corpus: Path) -> tuple[Any, Any, list[Any]]:
    """The vits run's trainer started from `source` as `trainer-core train` starts it; (plan, trainer, events)."""
    settings = {**FAST, "data.path": str(corpus), "data.cache_dir": str(tmp_path / "cache"),
                "train.init_from": str(source)}  # fmt: skip
    run_dir = tmp_path / "run"
    plan = make_plan("vits-medium", [f"{key}={json.dumps(value)}" for key, value in settings.items()],
                     run_dir=run_dir, use_machine_file=False)  # fmt: skip
    rundir.create_run_dir(run_dir)
    hub = EventHub(EventWriter(run_dir / rundir.EVENTS))
    trainer = build_trainer(plan, hub, ControlState(), run_dir)
    start_model(trainer, plan, hub, load_start_source(plan))
    return plan, trainer, read_all(run_dir / rundir.EVENTS)


def speaker_layers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in module.named_parameters()
            if CONDITIONING.match(name) or name == SPEAKER_TABLE}  # fmt: skip


def speech_of_each(generator: torch.nn.Module, speakers: int) -> list[torch.Tensor]:
    return [vega_speech(generator, IDS, speaker=sid) for sid in range(speakers)]


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return (a - b).abs().max().item()


def test_a_one_speaker_mms_voice_starts_each_common_voice_speaker_as_itself_and_exports_them(
    tmp_path: Path,
) -> None:
    source = make_folder(tmp_path / "mms-tts-tiny")
    corpus = tmp_path / "cv"
    common_voice_folder(corpus)
    plan, trainer, events = new_run(tmp_path, source, corpus)
    speakers = trainer.task.speaker_names
    assert speakers == ["spk_a", "spk_b", "spk_c"]  # client_id; spk_c's clips are held out, its row still exists
    said = "new speaker layers for 3 speakers (width vits.speaker_channels = 6), zero-initialised"
    assert said in plan.init_from["mapping"]["text"]
    start = of_type(events, "init_from")[0]
    assert start.form == "hf" and start.skipped == 0 and SPEAKER_TABLE in start.new_names
    notes = [event.message for event in of_type(events, "warning")]
    assert any(note.startswith("new speaker layers for 3 speakers, zero-initialised (a speaker table of width 6 "
                               "and 5 conditioning layers)") for note in notes), notes  # fmt: skip

    # Before any step every speaker says what the one-speaker source says (Vega's and transformers' speech).
    table = trainer.module.model_g.emb_g.weight
    assert table.shape == (3, 6) and gap(table[0], table[1]) > 0.1  # distinct speaker rows: the zeros decide
    alone = load_hf_generator(read_hf_voice(source)).eval()
    reference = vega_speech(alone, IDS)
    assert gap(reference, transformers_speech(source, IDS)) < TOLERANCE
    for spoken in speech_of_each(trainer.module.model_g.eval(), len(speakers)):
        assert gap(spoken, reference) <= SAME

    # They train: a step moves every plain layer and each weight-normed layer's gain (its direction has zero
    # gradient while the gain is zero), the next moves the directions and the speaker table too.
    before = speaker_layers(trainer.module)
    assert trainer.runner.run().applied
    once = speaker_layers(trainer.module)
    direction = ".parametrizations.weight.original1"
    assert all(gap(once[name], before[name]) > 1e-5 for name in before
               if not name.endswith(direction) and name != SPEAKER_TABLE)  # fmt: skip
    assert trainer.runner.run().applied
    twice = speaker_layers(trainer.module)
    assert all(gap(twice[name], once[name]) > 1e-5 for name in before)
    spoken = speech_of_each(trainer.module.model_g.eval(), len(speakers))
    assert gap(spoken[0], spoken[1]) > 0  # the speakers have begun to part

    # export --hf of the run: a three-speaker transformers folder that speaks each speaker as Vega does.
    with torch.no_grad():  # a voice trained longer: speakers far enough apart to tell by ear
        trainer.module.model_g.emb_g.weight.mul_(20.0)
    export = tmp_path / "run" / "export"
    config = {**trainer.task.model_config(), "step": 2, "profile": trainer.profile_toml}
    export_model(trainer.task.export_module(trainer.module), config, export)
    out = tmp_path / "hf"
    assert main(["export", "--hf", str(export), "--out", str(out)]) == 0
    document = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert document["num_speakers"] == 3 and document["speaker_embedding_size"] == 6
    ours = speech_of_each(trainer.module.model_g.eval(), len(speakers))
    theirs = [transformers_speech(out, IDS, speaker=sid) for sid in range(len(speakers))]
    for mine, its in zip(ours, theirs, strict=True):
        assert gap(mine, its) < TOLERANCE
    assert gap(theirs[0], theirs[2]) > 10 * TOLERANCE  # transformers' speaker_id chooses the speaker


def test_a_multi_speaker_transformers_voice_keeps_a_speaker_named_by_its_id(tmp_path: Path) -> None:
    """transformers numbers its speakers, so train.init_speaker = "2" keeps its speaker_id 2: the one-speaker
    model says what transformers says as speaker 2."""
    from dataclasses import replace

    from trainer_core.engine.model_source import load_model_source
    from trainer_core.engine.vits_init import apply_vits_init
    from trainer_core.models.vits.hf_config import vits_config_from_hf
    from trainer_core.models.vits.model import VitsModel

    folder = make_folder(tmp_path / "multi", seed=1, num_speakers=3, speaker_embedding_size=4)
    voice = read_hf_voice(folder)
    assert voice.speaker_names == ["0", "1", "2"]
    shape = vits_config_from_hf(voice.config, voice.describe(), n_vocab=voice.num_symbols)
    model = VitsModel(replace(shape, n_speakers=1, gin_channels=0, discriminator_channels=2)).eval()
    source = load_model_source(folder)
    assert source.vocabulary is not None
    report = apply_vits_init(model, source, source.vocabulary, [], strict=True, keep_speaker="2")
    assert any("kept speaker '2' of the source's 3" in note for note in report.notes)
    theirs = transformers_speech(folder, IDS, speaker=2)
    assert gap(vega_speech(model.model_g, IDS), theirs) < TOLERANCE
    other = transformers_speech(folder, IDS, speaker=0)  # another speaker: other durations or other audio
    assert other.shape != theirs.shape or gap(other, theirs) > 10 * TOLERANCE


def test_a_one_speaker_vega_vits_export_starts_every_speaker_as_itself(tmp_path: Path) -> None:
    """The same for a Vega vits run's export (not strict: its own speaker names decide what maps)."""
    from dataclasses import replace

    from conftest import new_vits_export
    from trainer_core.contract.init_sources import read_export_config
    from trainer_core.engine.export import load_exported
    from trainer_core.engine.model_source import load_model_source
    from trainer_core.engine.vits_init import apply_vits_init
    from trainer_core.models.vits.config import VitsConfig
    from trainer_core.models.vits.model import VitsModel
    from trainer_core.models.vits.synthesizer import Synthesizer

    folder = new_vits_export(tmp_path)
    shape = VitsConfig.from_dict(read_export_config(folder)["model"]["vits"])
    alone = Synthesizer(shape).eval()
    alone.load_state_dict(load_exported(folder)[0])
    model = VitsModel(replace(shape, n_speakers=2, gin_channels=4)).eval()
    source = load_model_source(folder)
    assert source.vocabulary is not None and not source.speaker_names
    report = apply_vits_init(model, source, source.vocabulary, ["ann", "bob"], strict=False)
    assert any(note.startswith("new speaker layers for 2 speakers, zero-initialised") for note in report.notes)
    reference = vega_speech(alone, [1, 2, 3, 4])
    assert reference.abs().max() > 1e-3  # speech, not silence
    assert all(gap(vega_speech(model.model_g, [1, 2, 3, 4], speaker=sid), reference) <= SAME for sid in (0, 1))
