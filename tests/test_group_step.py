"""Several optimizer groups in one step, in process: the real vocoder and vits tasks (a discriminator, then a
generator) on the bundled demo voice. A non-finite loss in either group skips the whole step, an out-of-memory
error in either group's pass leaves the weights exactly as a clean step at the halved micro-batch would, and every
parameter belongs to exactly one group."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import torch

from conftest import new_group_trainer, new_vocoder_trainer
from trainer_core.contract.errors import VegaError
from trainer_core.engine.grad_scaler import VegaGradScaler
from trainer_core.engine.group_step import GroupedStepRunner
from trainer_core.engine.optimizers import task_groups
from trainer_core.engine.trainer import Trainer
from trainer_core.models.base import GroupSpec
from trainer_core.tiny_profiles import Kind

pytestmark = pytest.mark.usefixtures("one_torch_thread", "keep_torch_threads", "faults_on")  # [debug] faults act


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: value.clone() for name, value in trainer.module.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_vocoder_trains_two_groups_in_update_order(tmp_path: Path) -> None:
    trainer = new_vocoder_trainer(tmp_path, "order")
    assert isinstance(trainer.runner, GroupedStepRunner)
    assert [group.name for group in trainer.runner.groups] == ["discriminator", "generator"]
    assert trainer.runner.groups.main.name == "generator"
    before = weights(trainer)
    outcome = trainer.runner.run()
    assert outcome.applied and trainer.state.step == 1
    assert set(outcome.losses) == {
        "discriminator.total", "generator.total", "generator.mel", "generator.adversarial", "generator.feature",
    }  # fmt: skip
    assert outcome.loss == outcome.losses["generator.total"]
    assert set(outcome.lrs) == {"discriminator", "generator"}
    after = weights(trainer)
    # Both the generator and the discriminators moved.
    for prefix in ("generator.", "discriminators."):
        assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith(prefix)), prefix


GROUP_KINDS: list[tuple[Kind, str]] = [
    ("vocoder", "discriminator"), ("vocoder", "generator"), ("vits", "discriminator"), ("vits", "generator"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "group"), GROUP_KINDS)
def test_a_nonfinite_loss_in_either_group_skips_the_whole_step(tmp_path: Path, kind: Kind, group: str) -> None:
    faults = ("debug.nonfinite_at_steps=[3]", f'debug.fault_group="{group}"')
    trainer = new_group_trainer(kind, tmp_path, group, *faults)
    for _ in range(2):
        assert trainer.runner.run().applied
    before, lrs = weights(trainer), trainer.runner.groups.lrs()
    optimizer_state = copy.deepcopy(trainer.runner.groups.state_dict())  # live tensors otherwise
    skipped = trainer.runner.run()
    assert not skipped.applied and trainer.state.step == 2
    # No group moved (the discriminator stepped first and was undone), no schedule advanced.
    assert same(weights(trainer), before)
    assert trainer.runner.groups.lrs() == lrs
    assert torch.equal(
        optimizer_state["optimizer.discriminator"]["state"][0]["exp_avg"],
        trainer.runner.groups.state_dict()["optimizer.discriminator"]["state"][0]["exp_avg"],
    )
    assert trainer.runner.run().applied and trainer.state.step == 3


@pytest.mark.parametrize(("kind", "group"), GROUP_KINDS)
def test_an_oom_in_either_group_halves_the_micro_batch_and_retries_from_the_same_weights(
    tmp_path: Path, kind: Kind, group: str
) -> None:
    faults = ("debug.oom_at_steps=[3]", f'debug.fault_group="{group}"')
    faulty = new_group_trainer(kind, tmp_path, f"oom-{group}", *faults)
    clean = new_group_trainer(kind, tmp_path, f"clean-{group}")
    for trainer in (faulty, clean):
        torch.manual_seed(0)  # one process, one generator: each twin draws the same noise (a VITS samples latents)
        for _ in range(2):
            trainer.runner.run()
    assert same(weights(faulty), weights(clean))
    # The clean twin takes step 3 at the micro-batch the recovery picks: the retried step must match it exactly,
    # the noise of the failed attempt included.
    clean.state.micro_batch, clean.state.grad_accum = 2, 2
    for trainer in (faulty, clean):
        torch.manual_seed(1)
        assert trainer.runner.run().applied
    assert (faulty.state.micro_batch, faulty.state.grad_accum) == (2, 2)
    assert faulty.state.step == clean.state.step == 3
    assert same(weights(faulty), weights(clean))


def test_every_trainable_parameter_must_be_in_exactly_one_group(tmp_path: Path) -> None:
    trainer = new_vocoder_trainer(tmp_path, "cover")
    task, model = trainer.task, trainer.module
    generator = list(model.generator.parameters())
    discriminators = list(model.discriminators.parameters())
    task.optimizer_groups = lambda: [GroupSpec("generator", generator)]  # type: ignore[method-assign]
    with pytest.raises(VegaError, match="parameters in no optimizer group: discriminators"):
        task_groups(task, model, trainer.profile, torch.device("cpu"), 1, 10)
    both = [GroupSpec("a", generator), GroupSpec("b", [*discriminators, generator[0]])]
    task.optimizer_groups = lambda: both  # type: ignore[method-assign]
    with pytest.raises(VegaError, match="in optimizer groups 'a' and 'b'"):
        task_groups(task, model, trainer.profile, torch.device("cpu"), 1, 10)


def test_fp16_with_one_scaler_for_both_optimizers_matches_vegas_own_scaler(tmp_path: Path) -> None:
    """torch's GradScaler and VegaGradScaler (the MPS fallback) step both groups to the same weights."""
    trainers = [new_vocoder_trainer(tmp_path, name, 'train.precision="fp16"') for name in ("torch", "vega")]
    vega = trainers[1].runner
    vega.precision = dataclasses.replace(vega.precision, scaler_kind="vega")
    assert isinstance(vega.precision.scaler, VegaGradScaler) and vega.precision.scaler.is_enabled()
    outcomes = [[trainer.runner.run() for _ in range(4)] for trainer in trainers]
    assert [o.applied for o in outcomes[0]] == [o.applied for o in outcomes[1]]
    assert any(o.applied for o in outcomes[0])
    assert [o.losses for o in outcomes[0]] == [o.losses for o in outcomes[1]]
    assert same(weights(trainers[0]), weights(trainers[1]))
    assert trainers[0].runner.precision.scaler.state_dict() == vega.precision.scaler.state_dict()


def test_two_accumulated_half_batches_step_both_groups_like_the_whole_batch(tmp_path: Path) -> None:
    whole, halves = new_vocoder_trainer(tmp_path, "whole"), new_vocoder_trainer(tmp_path, "halves")
    halves.state.micro_batch, halves.state.grad_accum = 2, 2
    a, b = whole.runner.run(), halves.runner.run()
    assert a.applied and b.applied and a.items == b.items == 4
    for name, value in a.losses.items():
        assert math.isclose(value, b.losses[name], rel_tol=1e-4), name
    for key, tensor in weights(whole).items():
        torch.testing.assert_close(tensor, weights(halves)[key], rtol=1e-4, atol=1e-6, msg=key)


def test_a_first_step_undone_leaves_the_earlier_group_without_optimizer_state(tmp_path: Path) -> None:
    """The discriminator had no Adam state before step 1: undoing its step must leave none (not zeros)."""
    trainer = new_vocoder_trainer(tmp_path, "first", "debug.nonfinite_at_steps=[1]", 'debug.fault_group="generator"')
    before = weights(trainer)
    assert not trainer.runner.run().applied
    assert same(weights(trainer), before)
    discriminator = trainer.runner.groups[0]
    assert discriminator.name == "discriminator" and len(discriminator.optimizer.state) == 0
    assert trainer.runner.run().applied and len(discriminator.optimizer.state) == len(discriminator.params)
