"""VegaGradScaler must behave exactly like torch.amp.GradScaler: same scales, skips, params, state."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from trainer_core.engine.grad_scaler import VegaGradScaler, step_was_skipped

STEPS = 300


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))


def _batches(steps: int, micro: int = 2) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    gen = torch.Generator().manual_seed(1)
    return [
        [(torch.randn(5, 6, generator=gen), torch.randn(5, 3, generator=gen)) for _ in range(micro)]
        for _ in range(steps)
    ]


def _poison_plan(steps: int) -> dict[int, float]:
    """Steps whose gradients get an inf or NaN: scattered ones plus long runs (scale collapse)."""
    gen = torch.Generator().manual_seed(2)
    scattered = torch.randint(0, steps, (30,), generator=gen).tolist()
    plan = {s: (math.inf if i % 2 else math.nan) for i, s in enumerate(scattered)}
    plan.update({s: -math.inf for s in range(40, 58)})  # a run of 18 infs
    plan.update({s: math.nan for s in range(200, 205)})
    return plan


class Lane:
    """One model + optimizer + scaler, driven step by step."""

    def __init__(self, scaler, model: torch.nn.Module, loss_gain: float = 1.0) -> None:
        self.scaler = scaler
        self.loss_gain = loss_gain
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(self, micro_batches, poison: float | None, clip: bool) -> tuple[bool, float]:
        self.opt.zero_grad(set_to_none=True)
        for x, y in micro_batches:  # gradient accumulation over micro-batches
            loss = torch.nn.functional.mse_loss(self.model(x), y) * self.loss_gain / len(micro_batches)
            self.scaler.scale(loss).backward()
        if poison is not None:
            self.model[0].weight.grad[1, 2] = poison
        if clip:
            self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        before = self.scaler.get_scale()
        self.scaler.step(self.opt)
        self.scaler.update()
        return step_was_skipped(self.scaler, before), self.scaler.get_scale()


def _assert_same(a: Lane, b: Lane) -> None:
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert a.scaler.state_dict() == b.scaler.state_dict()


SCENARIOS = {
    "default_factors": (1.0, dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)),
    # Non-power-of-two factors exercise float32 rounding; a huge scale times a large loss overflows
    # real gradients (natural skips), and growth past float32's range must be refused.
    "odd_factors_overflow": (3.0, dict(init_scale=3.0e37, growth_factor=3.0, backoff_factor=0.3, growth_interval=3)),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_parity_with_torch_scaler(name: str) -> None:
    gain, kwargs = SCENARIOS[name]
    ref = Lane(torch.amp.GradScaler("cpu", **kwargs), _model(), gain)
    vega = Lane(VegaGradScaler(**kwargs), _model(), gain)
    plan = _poison_plan(STEPS)
    natural_skips = refused_growths = 0
    for step, micro in enumerate(_batches(STEPS)):
        clip = step % 5 == 0
        scale_before = ref.scaler.get_scale()
        got_ref = ref.step(micro, plan.get(step), clip)
        got_vega = vega.step(micro, plan.get(step), clip)
        assert got_vega == got_ref, f"step {step}"
        assert vega.scaler.last_step_skipped == got_ref[0]
        _assert_same(ref, vega)
        assert got_ref[0] or step not in plan  # every poisoned step is skipped
        natural_skips += got_ref[0] and step not in plan
        tracker = ref.scaler.state_dict()["_growth_tracker"]
        refused_growths += not got_ref[0] and got_ref[1] == scale_before and tracker == 0
    if name == "odd_factors_overflow":
        assert natural_skips > 0 and refused_growths > 0  # the scenario reaches both edge cases
    assert 0 < vega.scaler.get_scale() < math.inf


def test_scale_collapses_and_recovers_like_torch() -> None:
    kwargs = dict(init_scale=2.0**16, growth_interval=3)
    ref, vega = Lane(torch.amp.GradScaler("cpu", **kwargs), _model()), Lane(VegaGradScaler(**kwargs), _model())
    trajectory = []
    for step, micro in enumerate(_batches(60, micro=1)):
        poison = math.inf if step < 20 else None
        assert ref.step(micro, poison, False) == vega.step(micro, poison, False)
        trajectory.append(vega.scaler.get_scale())
    assert trajectory[19] == 2.0**16 * 0.5**20
    assert trajectory[22] == trajectory[19] * 2  # grew after 3 finite steps
    _assert_same(ref, vega)


def test_state_dict_round_trip_mid_sequence_continues_identically() -> None:
    kwargs = dict(init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    ref, vega = Lane(torch.amp.GradScaler("cpu", **kwargs), _model()), Lane(VegaGradScaler(**kwargs), _model())
    batches, plan = _batches(120), _poison_plan(120)
    step = 0
    # Stop past step 60 part-way through a growth interval, so the tracker must survive the resume.
    while step < 60 or vega.scaler.state_dict()["_growth_tracker"] == 0:
        ref.step(batches[step], plan.get(step), False)
        vega.step(batches[step], plan.get(step), False)
        step += 1
    # Resume: a fresh scaler, model and optimizer loaded from the saved states.
    resumed = Lane(VegaGradScaler(init_scale=1.0, growth_interval=99), copy.deepcopy(vega.model))
    resumed.opt.load_state_dict(vega.opt.state_dict())
    resumed.scaler.load_state_dict(vega.scaler.state_dict())
    for later in range(step, 120):
        step = later
        assert resumed.step(batches[step], plan.get(step), False) == ref.step(batches[step], plan.get(step), False)
        _assert_same(ref, resumed)


def test_state_dicts_move_between_torch_and_vega() -> None:
    torch_scaler = torch.amp.GradScaler("cpu", init_scale=123.0, growth_interval=7)
    state = {"scale": 4096.0, "growth_factor": 3.0, "backoff_factor": 0.25, "growth_interval": 5, "_growth_tracker": 2}
    vega = VegaGradScaler()
    vega.load_state_dict(state)
    assert vega.state_dict() == state
    torch_scaler.load_state_dict(vega.state_dict())
    assert torch_scaler.state_dict() == state
    assert set(VegaGradScaler().state_dict()) == set(torch.amp.GradScaler("cpu").state_dict())


def test_two_optimizers_one_poisoned_matches_torch() -> None:
    lanes = []
    for scaler in (torch.amp.GradScaler("cpu", growth_interval=2), VegaGradScaler(growth_interval=2)):
        model = _model()
        opts = [torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.SGD(model[2].parameters(), lr=0.1)]
        lanes.append((scaler, model, opts))
    for step, (x, y) in enumerate(mb[0] for mb in _batches(12)):
        for scaler, model, opts in lanes:
            scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
            if step % 4 == 1:
                model[2].bias.grad[0] = math.nan
            results = [scaler.step(opt) for opt in opts]
            scaler.update()
            for opt in opts:
                opt.zero_grad()
        (ts, tm, _), (vs, vm, _) = lanes
        assert ts.get_scale() == vs.get_scale()
        assert all(torch.equal(a, b) for a, b in zip(tm.parameters(), vm.parameters(), strict=True))
    assert results is not None


def test_step_returns_optimizer_result_or_none_when_skipped() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = VegaGradScaler()
    x = torch.randn(2, 6)
    scaler.scale(model(x).sum()).backward()
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(opt, closure=lambda: 0.0)
    assert scaler.step(opt) is None and not scaler.last_step_skipped
    scaler.update()
    opt.zero_grad()
    scaler.scale(model(x).sum()).backward()
    model[0].bias.grad[0] = math.inf
    before = [p.clone() for p in model.parameters()]
    assert scaler.step(opt) is None and scaler.last_step_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    scaler.update()
    assert scaler.get_scale() == 2.0**15


def test_misuse_raises_like_torch() -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = VegaGradScaler()
    with pytest.raises(RuntimeError, match="No inf checks"):
        scaler.update()
    scaler.scale(model(torch.randn(2, 6)).sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update()
    with pytest.raises(ValueError, match="growth_factor"):
        VegaGradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff_factor"):
        VegaGradScaler(backoff_factor=1.0)
    with pytest.raises(RuntimeError, match="empty"):
        scaler.load_state_dict({})
    idle = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)  # no parameter has a grad
    with pytest.raises(RuntimeError, match="none of its parameters has a grad"):
        scaler.step(idle)


def test_fp16_gradients_are_refused() -> None:
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    param.grad = torch.ones(3, dtype=torch.float16)
    opt = torch.optim.SGD([param], lr=0.1)
    with pytest.raises(ValueError, match="FP16"):
        VegaGradScaler().unscale_(opt)


def test_update_with_new_scale_and_scaling_containers() -> None:
    scaler = VegaGradScaler(init_scale=8.0)
    t = torch.tensor(1.5)
    scaled = scaler.scale([t, (t, t)])
    assert isinstance(scaled, list) and isinstance(scaled[1], tuple)
    assert float(scaled[1][0]) == 12.0
    scaler.update(new_scale=0.1)
    assert scaler.get_scale() == float(torch.tensor(0.1, dtype=torch.float32))
    scaler.update(new_scale=torch.tensor(32.0))
    assert scaler.get_scale() == 32.0


def test_disabled_scaler_is_a_pass_through_like_torch() -> None:
    for scaler in (VegaGradScaler(enabled=False), torch.amp.GradScaler("cpu", enabled=False)):
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(torch.randn(2, 6)).sum()
        assert scaler.scale(loss) is loss
        loss.backward()
        model[0].bias.grad[0] = math.nan
        before = model[2].weight.clone()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        assert not torch.equal(before, model[2].weight)  # stepped despite the NaN: scaling is off
        assert scaler.get_scale() == 1.0 and scaler.state_dict() == {} and not scaler.is_enabled()
        assert not step_was_skipped(scaler, 1.0)
        scaler.load_state_dict({})
