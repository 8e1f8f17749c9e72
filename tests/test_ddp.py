"""Data-parallel training through torchrun: launching, sharding, rank agreement, and a real 2-process gloo run.

The end-to-end test runs the tiny byte-level LM on the CPU with two gloo ranks, twice side by side:
- "whole": plain `python -m torch.distributed.run --standalone --nproc-per-node 2 -m trainer_core train`
  without --run-dir (rank 0 names the folder and tells rank 1), 24 steps uninterrupted;
- "split": `trainer-core train --nproc-per-node 2 --mode mixed` on a machine without GPUs (which falls back to
  CPU ranks with a warning, then re-executes itself under torchrun), stopped through the control socket after
  step 8, then resumed with `--resume auto` to step 24.
Both ranks must end with identical parameters (the digest each rank logs, and the final checkpoint's), and
the resumed run must match the uninterrupted one step for step, and in its final weights.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import FAULTS_ON, TrainerLauncher, finished, of_type, set_args, step_rows
from test_voice_dataset import batch_items, encode, features_of_lengths, varied_lengths
from trainer_core.contract.errors import DeviceError, VegaError
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.nvml import GpuInfo, StaticGpuSource
from trainer_core.contract.profile import Profile
from trainer_core.contract.resources import probe
from trainer_core.data.text import TextCorpus
from trainer_core.data.voice_dataset import VoiceDataset
from trainer_core.engine.checkpoint_manager import list_checkpoints, load_checkpoint
from trainer_core.engine.distributed import MAX_COMMANDS, RankRates, decode_sync_rows, encode_sync_row, parameter_digest
from trainer_core.plan import plan_launch
from trainer_core.world import World, launch_argv, rank_log_name, without_nproc
from vega_tui import runner

STEPS = 24
DDP_SETTINGS = {"train.max_steps": STEPS, "train.eval_every_steps": 6, "train.checkpoint_every_steps": 6}
MIXED = ("--nproc-per-node", "2", "--mode", "mixed")
NO_GPU = {"VEGA_FAKE_GPUS": "[]"}
DIGEST_RE = re.compile(r"parameter digest of rank (\d+) of 2 .*: ([0-9a-f]{64})")
GIB = 1024**3


# ---------------------------------------------------------------------------------------------------------------
# Launching


def test_nproc_is_removed_in_every_spelling_argparse_accepts() -> None:
    args = ["--debug", "train", "--nproc-per-node", "2", "--profile", "p.toml", "--nproc=3", "--nproc-per-node=4"]
    assert without_nproc(args) == ["--debug", "train", "--profile", "p.toml"]
    others = ["train", "--no-machine-file", "--set", "a.b=1"]
    assert without_nproc(others) == others


def test_launch_argv_is_torchrun_standalone_with_the_same_arguments() -> None:
    argv = launch_argv(2, ["train", "--nproc-per-node", "2", "--profile", "x y.toml"], python="/py")
    assert argv == [
        "/py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "trainer_core",
        "train",
        "--profile",
        "x y.toml",
    ]


def test_world_comes_from_the_torchrun_environment() -> None:
    assert World.from_env({}) == World()
    world = World.from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (world.rank, world.world_size, world.local_rank, world.local_world_size, world.active) == (3, 4, 1, 2, True)
    assert not world.is_main
    with pytest.raises(VegaError, match="RANK='x' is not a whole number"):
        World.from_env({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(VegaError, match="inconsistent torchrun environment"):
        World.from_env({"RANK": "2", "WORLD_SIZE": "2"})


def resources_with(gpus: int):
    fakes = [
        GpuInfo(
            index=i, name="Fake", memory_total_bytes=24 * GIB, memory_free_bytes=20 * GIB, memory_used_bytes=4 * GIB
        )
        for i in range(gpus)
    ]
    return probe(StaticGpuSource(fakes))


def profile_in(mode: str) -> Profile:
    return Profile.model_validate({"compute": {"mode": mode}})


def test_compute_modes_keep_their_meaning_with_several_processes() -> None:
    with pytest.raises(DeviceError, match="--nproc-per-node 2 needs 2 CUDA GPUs, this machine has 1"):
        plan_launch(profile_in("gpu"), 2, resources_with(1))
    assert plan_launch(profile_in("gpu"), 2, resources_with(2)).device_kind == "cuda"
    fewer = plan_launch(profile_in("mixed"), 4, resources_with(2))
    assert (fewer.nproc, fewer.device_kind) == (2, "cuda") and "training with 2 process(es)" in fewer.notes[0]
    cpu = plan_launch(profile_in("mixed"), 2, resources_with(0))
    assert (cpu.nproc, cpu.device_kind) == (2, "cpu") and "train on the CPU" in cpu.notes[0]
    assert plan_launch(profile_in("cpu"), 3, resources_with(2)) == plan_launch(profile_in("cpu"), 3, resources_with(0))
    pinned = Profile.model_validate({"compute": {"mode": "mixed", "device": "cuda:1"}})
    with pytest.raises(DeviceError, match="names one device"):
        plan_launch(pinned, 2, resources_with(2))


def test_dry_run_shows_the_processes_and_gpu_mode_refuses_too_few(trainers: TrainerLauncher) -> None:
    base = trainers.command(trainers.root / "dry", {}, None, ())
    plan = subprocess.run(
        [*base, "--nproc-per-node", "2", "--dry-run", "--json"],
        capture_output=True,
        text=True,
        env=trainers.env,
        timeout=60,
    )
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["distributed"] == {"nproc_per_node": 2, "device_kind": "cpu", "requested": 2}
    one_gpu = json.dumps([{"name": "Fake", "memory_total_bytes": 24 * GIB, "memory_free_bytes": 20 * GIB}])
    refused = subprocess.run(
        [*base, "--nproc-per-node", "2", "--mode", "gpu"],
        capture_output=True,
        text=True,
        env={**trainers.env, "VEGA_FAKE_GPUS": one_gpu},
        timeout=60,
    )
    assert refused.returncode == 2
    assert "error: compute mode gpu: --nproc-per-node 2 needs 2 CUDA GPUs, this machine has 1" in refused.stderr
    assert not (trainers.root / "dry").exists()


# ---------------------------------------------------------------------------------------------------------------
# The step boundary and per-rank telemetry


def test_any_rank_stops_everyone_and_commands_come_from_rank_zero() -> None:
    rank0 = encode_sync_row(False, False, 100, 0.5, 0.1, ["pause", "save"])
    rank1 = encode_sync_row(True, True, 7, 0.25, 0.0, ["evaluate"])
    agreed = decode_sync_rows([rank0, rank1])
    assert agreed.stop and not agreed.finished and agreed.total_steps == 100
    assert agreed.commands == ["pause", "save"]
    assert agreed.step_seconds == [0.5, 0.25] and agreed.data_seconds == [0.1, 0.0]
    many = decode_sync_rows([encode_sync_row(False, True, 1, 0, 0, ["resume"] * 20)])
    assert many.finished and many.commands == ["resume"] * MAX_COMMANDS


def test_rank_rates_are_each_ranks_own_samples_per_second() -> None:
    rates = RankRates(world_size=2)
    assert rates.flush() == ([], [])
    rates.add([0.5, 1.0], [0.25, 0.0], items_per_rank=8)
    rates.add([0.5, 1.0], [0.25, 0.5], items_per_rank=8)
    assert rates.flush() == ([16.0, 8.0], [0.5, 0.25])  # samples/s, data-wait fraction per rank


# ---------------------------------------------------------------------------------------------------------------
# Sharding: disjoint slices that together make the global batch


def global_rows(batches) -> list[list[list[int]]]:
    return [batch["input"].tolist() for batch, _ in batches]


def test_text_shards_are_disjoint_and_make_up_the_global_batch(corpus: Path) -> None:
    whole = TextCorpus.from_folder(corpus, context_bytes=32, val_fraction=0.1, seed=7)
    shards = [TextCorpus.from_folder(corpus, context_bytes=32, val_fraction=0.1, seed=7) for _ in range(2)]
    for rank, shard in enumerate(shards):
        shard.shard(rank, 2)
    for start in (0, 24):
        expected = list(whole.train_batches(epoch=1, batch_size=8, start_item=start))
        parts = [list(s.train_batches(epoch=1, batch_size=4, start_item=start)) for s in shards]
        assert [n for _, n in parts[0]] == [n for _, n in parts[1]] == [n for _, n in expected]
        for (full, _), (a, _), (b, _) in zip(expected, *parts, strict=True):
            rows = full["input"].tolist()
            # Items rank, rank + world, ...: interleaved, the two shards are exactly the global batch.
            assert a["input"].tolist() == rows[0::2] and b["input"].tolist() == rows[1::2]
    val = [row for s in shards for row in (r for b in s.val_batches(4) for r in b["input"].tolist())]
    assert sorted(val) == sorted(r for b in whole.val_batches(4) for r in b["input"].tolist())


def test_voice_shards_are_disjoint_and_keep_the_epoch_order() -> None:
    def dataset() -> VoiceDataset:
        return VoiceDataset(features_of_lengths(varied_lengths(120)), encode, val_fraction=0.1, seed=5, bucket_size=8)

    whole, shards = dataset(), [dataset(), dataset()]
    for rank, shard in enumerate(shards):
        shard.shard(rank, 2)
    expected = [batch_items(b) for b, _ in whole.train_batches(0, 8, start_item=16)]
    parts = [[batch_items(b) for b, _ in s.train_batches(0, 4, start_item=16)] for s in shards]
    assert [a + b for a, b in zip(*parts, strict=True)] == [full[0::2] + full[1::2] for full in expected]
    val = sorted(i for s in shards for b in s.val_batches(3) for i in batch_items(b))
    assert val == sorted(i for b in whole.val_batches(3) for i in batch_items(b))


def test_a_bad_shard_is_refused(corpus: Path) -> None:
    text = TextCorpus.from_folder(corpus, context_bytes=32, val_fraction=0.1, seed=7)
    with pytest.raises(ValueError, match="rank must be within 0..1"):
        text.shard(2, 2)


def test_parameter_digest_sees_any_change() -> None:
    state = {"w": torch.zeros(3, 2), "b": torch.ones(2, dtype=torch.bfloat16)}
    same = {"b": torch.ones(2, dtype=torch.bfloat16), "w": torch.zeros(3, 2)}
    assert parameter_digest(state) == parameter_digest(same)
    changed = {**state, "w": state["w"].clone()}
    changed["w"][1, 1] = 1e-30
    assert parameter_digest(changed) != parameter_digest(state)


# ---------------------------------------------------------------------------------------------------------------
# Two gloo ranks on the CPU, end to end


def rank_digests(run_dir: Path) -> dict[int, str]:
    """The last parameter digest each rank logged (rank 0 in trainer.log, rank 1 in its own log)."""
    found: dict[int, str] = {}
    for name in ("trainer.log", rank_log_name(1)):
        for rank, digest in DIGEST_RE.findall((run_dir / name).read_text(encoding="utf-8")):
            found[int(rank)] = digest
    return found


def start_plain_torchrun(trainers: TrainerLauncher, runs_root: Path) -> subprocess.Popen:
    """`torchrun -m trainer_core train` without --run-dir: rank 0 proposes the folder under run.runs_dir."""
    settings = {**DDP_SETTINGS, "run.runs_dir": str(runs_root)}
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "trainer_core",
    ]
    argv += ["train", "--profile", str(trainers.profile), "--data", str(trainers.corpus), *set_args(settings)]
    out = open(trainers.root / "whole.out", "wb")  # noqa: SIM115 - closed with the process below
    return subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=trainers.root, env=trainers.env
    )


def wait_for_control(run_dir: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not runner.socket_ready(run_dir):
        assert time.monotonic() < deadline, "the DDP trainer never opened its control socket"
        time.sleep(0.05)


def two_ranks_stop_resume_and_end_identical(launcher: TrainerLauncher, settings: dict, stop_at: int) -> None:
    """Two gloo ranks, stopped at `stop_at` or later and resumed, against an uninterrupted run: both end at
    train.max_steps with equal ranks, equal checkpoints and the same per-step losses."""
    steps = settings["train.max_steps"]
    whole = launcher.start("whole", settings, *MIXED, env=NO_GPU)
    split = launcher.start("split", settings, *MIXED, env={**NO_GPU, **FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.5"})
    split.wait_for_step(stop_at, timeout=120)
    wait_for_control(split.run_dir)
    assert runner.send(split.run_dir, "stop").ok
    assert split.wait(timeout=120) == 0, split.stderr
    first = finished(split.events())
    assert first.status == "stopped" and stop_at <= first.step < steps
    resumed = launcher.run("split", settings, *MIXED, "--resume", "auto", run_dir=split.run_dir, env=NO_GPU)
    assert resumed.proc.returncode == 0, resumed.stderr
    assert whole.wait(timeout=180) == 0, whole.stderr
    for run_dir in (split.run_dir, whole.run_dir):
        events = read_all(run_dir / "events.jsonl")
        assert finished(events).status == "completed" and finished(events).step == steps
        assert all(e.world_size == 2 for e in of_type(events, "step"))
        digests = rank_digests(run_dir)
        assert set(digests) == {0, 1} and digests[0] == digests[1]
        newest = list_checkpoints(run_dir / "checkpoints")[0]
        assert parameter_digest(load_checkpoint(newest)["model"]) == digests[0]
    assert step_rows(split.events()) == step_rows(whole.events())
    assert rank_digests(split.run_dir) == rank_digests(whole.run_dir)


def test_two_gloo_ranks_train_stop_resume_and_end_identical(trainers: TrainerLauncher) -> None:
    runs_root = trainers.root / "runs"
    whole = start_plain_torchrun(trainers, runs_root)
    # Slow steps give the stop room to land before the last step, even on a loaded machine.
    split = trainers.start(
        "split", DDP_SETTINGS, *MIXED, env={**NO_GPU, **FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.25"}
    )
    split.wait_for_step(8)
    wait_for_control(split.run_dir)
    assert runner.send(split.run_dir, "stop").ok
    assert split.wait() == 0, split.stderr
    first = finished(split.events())
    assert first.status == "stopped" and 8 <= first.step < STEPS

    resumed = trainers.run("split", DDP_SETTINGS, *MIXED, "--resume", "auto", run_dir=split.run_dir, env=NO_GPU)
    assert resumed.proc.returncode == 0, resumed.stderr
    assert whole.wait(timeout=120) == 0, (trainers.root / "whole.out").read_text()
    (whole_dir,) = runs_root.iterdir()
    items = TextCorpus.from_folder(trainers.corpus, 32, 0.1, 7).train_items()
    check_ddp_run(split.run_dir, items, resumed_at=first.step)
    check_ddp_run(whole_dir, items, resumed_at=None)
    # Exact resume under DDP: the same losses and learning rates at every step, and the same final weights.
    assert step_rows(split.events()) == step_rows(read_all(whole_dir / "events.jsonl"))
    assert rank_digests(split.run_dir) == rank_digests(whole_dir)
    # Mixed mode without a GPU: both segments said why their ranks train on the CPU.
    warnings = [e.message for e in of_type(split.events(), "warning")]
    assert sum("no usable CUDA GPU" in w and "the 2 processes train on the CPU (gloo)" in w for w in warnings) == 2


def check_ddp_run(run_dir: Path, train_items: int, resumed_at: int | None) -> None:
    events = read_all(run_dir / "events.jsonl")
    end = finished(events)
    assert end.status == "completed" and end.step == STEPS
    hellos = of_type(events, "hello")
    assert all(h.world_size == 2 and h.rank == 0 and h.backend == "gloo" for h in hellos)
    steps = of_type(events, "step")
    assert all(e.world_size == 2 for e in steps)
    assert any(len(e.rank_samples_per_s) == 2 and min(e.rank_samples_per_s) > 0 for e in steps)
    # Each step takes a global batch of 8 items per rank x 2 ranks.
    (epoch,) = {e.steps_in_epoch for e in of_type(events, "epoch_start")}
    assert epoch == train_items // 16
    if resumed_at is not None:
        said = [e.message for e in of_type(events, "log") if e.message.startswith(f"resumed from {run_dir}")]
        assert len(said) == 1 and f"step {resumed_at}," in said[0]
    # Both ranks end with the same parameters, and they are the ones rank 0 saved.
    digests = rank_digests(run_dir)
    assert set(digests) == {0, 1} and digests[0] == digests[1]
    newest = list_checkpoints(run_dir / "checkpoints")[0]
    assert newest.name == f"step-{STEPS:08d}.pt"
    assert parameter_digest(load_checkpoint(newest)["model"]) == digests[0]
    # Rank 1 wrote nothing in the run folder but its log.
    names = {p.name for p in run_dir.iterdir()}
    assert names == {
        "checkpoints",
        "samples",
        "export",
        "events.jsonl",
        "profile.toml",
        "session.json",
        "trainer.log",
        rank_log_name(1),
    }
    assert "[rank 1]" in (run_dir / rank_log_name(1)).read_text(encoding="utf-8")
