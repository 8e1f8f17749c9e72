"""Two machines, played on one: `trainer-core train --nnodes 2 --node-rank R --master-addr 127.0.0.1`.

Each node is its own `trainer-core` process with its own working folder (so its own ./runs root), one gloo
process per node, joined by torchrun's static rendezvous on a free local port. Node 0's run is stopped with
SIGTERM, then both nodes resume with `--resume auto`: node 1's folder holds only its rank log, so the
checkpoint reaches it from rank 0. Beside it a one-node two-process run (`--nproc-per-node 2`) goes through
uninterrupted: the two must match step for step and in their final weights, as in tests/test_ddp.py.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FAULTS_ON, TRAINER_CORE, TrainerLauncher, finished, set_args, step_rows
from test_ddp import DIGEST_RE
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event
from trainer_core.engine.checkpoint_manager import list_checkpoints, load_checkpoint
from trainer_core.engine.distributed import parameter_digest
from trainer_core.world import DistributedError, check_nodes, launch_argv, rank_log_name

STEPS = 8
SETTINGS = {
    "train.max_steps": STEPS,
    "train.eval_every_steps": 4,
    "train.checkpoint_every_steps": 4,
}


def test_node_flags_are_checked_together_and_reach_torchrun() -> None:
    nodes = check_nodes(2, 1, "10.0.0.5", None)
    assert nodes is not None and nodes.master_port == 29500
    argv = launch_argv(
        1,
        ["train", "--nnodes", "2", "--node-rank=1", "--master-addr", "h", "--nproc", "1"],
        "/py",
        nodes,
    )
    assert argv[3:11] == [
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "10.0.0.5",
        "--master-port",
        "29500",
    ]
    assert argv[-1] == "train" and "--standalone" not in argv
    assert check_nodes(None, None, None, None) is None and check_nodes(1, 0, None, None) is None
    with pytest.raises(DistributedError, match="--node-rank 2 with --nnodes 2: node ranks are 0 to 1"):
        check_nodes(2, 2, "h", None)
    with pytest.raises(DistributedError, match="--nnodes 2 needs --master-addr ADDRESS"):
        check_nodes(2, 0, None, None)
    with pytest.raises(DistributedError, match="--nnodes 2 needs --node-rank R"):
        check_nodes(2, None, "h", None)
    with pytest.raises(DistributedError, match="--master-addr without --nnodes"):
        check_nodes(None, None, "h", None)
    with pytest.raises(DistributedError, match="--master-port must be a TCP port"):
        check_nodes(2, 0, "h", 70000)


def test_bad_node_flags_stop_the_command_before_anything_starts(trainers: TrainerLauncher) -> None:
    base = [
        *TRAINER_CORE,
        "train",
        "--profile",
        str(trainers.profile),
        "--data",
        str(trainers.corpus),
    ]
    for flags, said in [
        (
            ["--nnodes", "2", "--node-rank", "2", "--master-addr", "h"],
            "--node-rank 2 with --nnodes 2",
        ),
        (["--nnodes", "2", "--node-rank", "1"], "--nnodes 2 needs --master-addr ADDRESS"),
    ]:
        done = subprocess.run(
            [*base, *flags],
            capture_output=True,
            text=True,
            env=trainers.env,
            cwd=trainers.root,
            timeout=60,
        )
        assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (trainers.root / "runs").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Node commands still running at the end are stopped as a person would (SIGTERM reaches torchrun's
    workers through it), killed only if that does not end them."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_node(
    trainers: TrainerLauncher, rank: int, port: int, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`trainer-core train --nnodes 2 --node-rank RANK` from node RANK's own folder (its ./runs root)."""
    home = trainers.root / f"node{rank}"
    home.mkdir(exist_ok=True)
    argv = [
        *TRAINER_CORE,
        "train",
        "--profile",
        str(trainers.profile),
        "--data",
        str(trainers.corpus),
    ]
    argv += [*set_args(SETTINGS), "--nnodes", "2", "--node-rank", str(rank)]
    argv += ["--master-addr", "127.0.0.1", "--master-port", str(port), *extra]
    out = open(home / f"node.{len(list(home.glob('node.*')))}.out", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=home,
        env={**trainers.env, **(env or {})},
    )
    out.close()
    return proc


def node_run_dir(trainers: TrainerLauncher, rank: int, timeout: float = 60.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list((trainers.root / f"node{rank}" / "runs").glob("*"))
        if found:
            return found[0]
        time.sleep(0.05)
    pytest.fail(f"node {rank} made no run folder; output:\n{node_output(trainers, rank)}")


def node_output(trainers: TrainerLauncher, rank: int) -> str:
    return "\n".join(
        p.read_text(errors="replace")[-2000:] for p in sorted((trainers.root / f"node{rank}").glob("*.out"))
    )


def wait_for_step(run_dir: Path, step: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = run_dir / "events.jsonl"
        if path.is_file() and any(e.type == "step" and e.step >= step for e in read_all(path)):
            return
        time.sleep(0.05)
    pytest.fail(f"no step {step} in {run_dir} within {timeout:g} s")


def digests(*logs: Path) -> dict[int, str]:
    found: dict[int, str] = {}
    for log in logs:
        for rank, digest in DIGEST_RE.findall(log.read_text(encoding="utf-8")):
            found[int(rank)] = digest
    return found


def events_of(run_dir: Path) -> list[Event]:
    return read_all(run_dir / "events.jsonl")


def test_two_nodes_stop_on_sigterm_and_resume_like_one_node(
    trainers: TrainerLauncher, started: list[subprocess.Popen[bytes]]
) -> None:
    whole = trainers.start("whole", SETTINGS, "--nproc-per-node", "2")
    port = free_port()
    slow = {
        **FAULTS_ON,
        "VEGA_FAULT_STEP_SLEEP_S": "0.25",
    }  # room for the stop to land before the last step
    nodes = [start_node(trainers, rank, port, env=slow) for rank in (0, 1)]
    started += nodes
    run0 = node_run_dir(trainers, 0)
    wait_for_step(run0, 2)
    nodes[0].send_signal(signal.SIGTERM)
    for rank, proc in enumerate(nodes):
        proc.wait(timeout=90)
        assert rank == 0 or proc.returncode == 0, node_output(trainers, rank)
    first = finished(events_of(run0))
    assert first.status == "stopped" and 2 <= first.step < STEPS, node_output(trainers, 0)

    # Only node 0 holds checkpoints: node 1's folder of the same name has its rank log and nothing else.
    run1 = trainers.root / "node1" / "runs" / run0.name
    assert sorted(p.name for p in run1.iterdir()) == [rank_log_name(1)]
    port = free_port()
    resume = ("--resume", "auto", "--run-dir", f"runs/{run0.name}")
    nodes = [start_node(trainers, rank, port, *resume) for rank in (0, 1)]
    started += nodes
    for rank, proc in enumerate(nodes):
        assert proc.wait(timeout=90) == 0, node_output(trainers, rank)
    assert whole.wait(timeout=90) == 0, whole.stderr

    events = events_of(run0)
    assert finished(events).status == "completed" and finished(events).step == STEPS
    said = [e.message for e in events if e.type == "log" and e.message.startswith("resumed from")]
    assert len(said) == 1 and f"step {first.step}," in said[0]
    assert all(e.world_size == 2 for e in events if e.type == "step")
    assert sorted(p.name for p in run1.iterdir()) == [rank_log_name(1)]
    assert rank_log_name(1) not in {p.name for p in run0.iterdir()}
    # The two-node run, stopped and resumed, is the one-node run: same losses and rates, same final weights.
    assert step_rows(events) == step_rows(whole.events())
    two = digests(run0 / "trainer.log", run1 / rank_log_name(1))
    one = digests(whole.run_dir / "trainer.log", whole.run_dir / rank_log_name(1))
    assert set(two) == {0, 1} and two == one and two[0] == two[1]
    newest = list_checkpoints(run0 / "checkpoints")[0]
    assert parameter_digest(load_checkpoint(newest)["model"]) == two[0]
