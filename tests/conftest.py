"""Shared fixtures for the end-to-end trainer tests (tests/test_train_*.py).

Trainers run on the CPU: a tiny byte-level model over a small generated English corpus, with
VEGA_CONFIG_DIR pointing at an empty folder so that no machine file or user profile of this computer
changes the run. One torch thread per trainer: two trainers (or a trainer and another test) on a 2-core
box must not fight over cores.

A test of the process (signals, exit on a crash, detaching, DDP ranks, the terminal) starts a real
`python -m trainer_core` subprocess (TrainerLauncher.start/run, run_cli). A test of what a command does
runs it through the same entry point in the test's own process (run_here, TrainerLauncher.run_here):
a subprocess would spend ~4 s of CPU importing torch and torch._dynamo before its first step.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event
from trainer_core.tiny_profiles import Kind, tiny_profile

# bench/trainer_runs.py runs a command in this process for the benchmarks' smoke runs; the tests share it.
sys.path.append(str(Path(__file__).resolve().parent.parent / "bench"))
from trainer_runs import in_this_process  # noqa: E402

# Under pytest-xdist's workers on two cores, one torch thread per process (workers and the trainers they
# start): two threads each would oversubscribe the cores, and that is far slower.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"


# Each worker takes whole files (--dist loadfile, --no-loadscope-reorder): the longest start first, so that
# no worker is left with a long file while the others idle at the end. Longest first in a one-process run.
LONGEST_FIRST = (
    "test_bench.py", "test_reliability.py", "test_app_run.py", "test_vits_piper_export.py",
    "test_memory_manager.py", "test_custom_task.py", "test_vocoder_train.py", "test_vits_pilot.py",
    "test_vits_train.py", "test_app_launch.py", "test_vits_piper.py", "test_ddp_nodes.py", "test_tmux.py",
    "test_train_resume.py", "test_store.py", "test_ddp.py", "test_mms_walkthrough.py", "test_security.py",
    "test_app_live.py", "test_train_control.py", "test_tensorboard.py", "test_group_step.py",
    "test_warmup_fit.py",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


_TRAINER_LOGGER = logging.getLogger("trainer_core")
# As the session found it: a module fixture's in-process run changes it before any test's own save.
_PRISTINE_LOGGER = (list(_TRAINER_LOGGER.handlers), _TRAINER_LOGGER.level, _TRAINER_LOGGER.propagate)


@pytest.fixture(autouse=True)
def trainer_logger_restored() -> Iterator[None]:
    """An in-process run points the trainer_core logger at its own run folder and stops it propagating;
    later tests (caplog) need it as the session found it."""
    yield
    logger, (handlers, level, propagate) = _TRAINER_LOGGER, _PRISTINE_LOGGER
    for handler in logger.handlers:
        if handler not in handlers:
            handler.close()
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


REPO = Path(__file__).resolve().parent.parent
# The trainer's command line under this interpreter, as the dashboard spawns it.
TRAINER_CORE = [sys.executable, "-m", "trainer_core"]
WORDS = [
    "the",
    "a",
    "small",
    "model",
    "learns",
    "to",
    "read",
    "and",
    "write",
    "bytes",
    "of",
    "plain",
    "english",
    "text",
    "while",
    "it",
    "trains",
    "on",
    "short",
    "stories",
    "about",
    "foxes",
    "dogs",
    "rivers",
    "and",
    "quiet",
    "towns",
    "where",
    "people",
    "walk",
    "slowly",
    "every",
    "morning",
]
# The tiny profile every end-to-end test starts from; tests change fields with --set.
TINY_PROFILE = tiny_profile("lm", run={"name": "e2e"})
# Fields set on every run unless a test overrides them (None removes one: the profile default applies).
DEFAULT_SETTINGS: dict[str, Any] = {"train.max_steps": 40}
# Generous: other test processes share the two cores.
# The shipped demo voice (330 clips) is for users; tests use a 40-clip corpus of their own to stay fast.
DEMO_VOICE = REPO / "trainer_core" / "demo" / "voice"
TEST_VOICE = REPO / "tests" / "fixtures" / "voice"


def run_cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`trainer-core ARGS` as a real subprocess of this interpreter, from the repository root."""
    return subprocess.run([*TRAINER_CORE, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)


def run_here(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`trainer-core ARGS` through its entry point in this process, from `cwd`, with `env` as the whole
    environment: what run_cli gives, less the second start-up of torch (~4 s of CPU a trainer). For tests of what a
    command does; signals, crashes and detaching need the real process of run_cli. Main thread only (signals)."""
    code, out, err = in_this_process(list(args), env, cwd)
    return subprocess.CompletedProcess([*TRAINER_CORE, *args], code, out, err)


def tiny_voice_profile(
    name: str, steps: int, eval_every: int, sentences: list[str], seed: int = 3, logging: dict[str, Any] | None = None
) -> str:
    """A TOML profile for a seconds-long voice run on the bundled demo corpus (CPU, one thread, tiny model)."""
    return tiny_profile(
        "tts",
        run={"name": name, "seed": seed},
        data={"path": str(TEST_VOICE), "cache_dir": "cache"},
        train={"warmup_steps": 2, "max_steps": steps, "eval_every_steps": eval_every},
        tts={"text_units": "chars", "griffin_lim_iters": 4},
        sample={"sentences": sentences},
        logging={"step_interval_s": None, **(logging or {})},
    )


RUN_TIMEOUT_S = 90.0
# Fault switches (VEGA_FAULT_*, the profile's [debug] faults) act only with this set as well (contract.fault_gate).
FAULTS_ON = {"VEGA_FAULTS": "1"}


def write_corpus(folder: Path, documents: int = 6, lines: int = 50, seed: int = 0) -> Path:
    """`documents` .txt files of English-like sentences (about 3 KB each), deterministic for a seed."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(documents):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(10)).capitalize() + "." for _ in range(lines)]
        (folder / f"story-{n}.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return folder


def toml_value(value: Any) -> str:
    """A Python value as the TOML text `--set` expects."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def set_args(settings: dict[str, Any]) -> list[str]:
    return [arg for key, value in settings.items() for arg in ("--set", f"{key}={toml_value(value)}")]


def step_rows(events: list[Event]) -> dict[int, list[tuple[float | None, float]]]:
    """Step number -> every (loss, lr) the step events report for it (a step repeated = listed twice)."""
    rows: dict[int, list[tuple[float | None, float]]] = {}
    for event in events:
        if event.type == "step":
            for step, loss, lr in zip(event.step_series, event.loss_series, event.lr_series, strict=True):
                rows.setdefault(step, []).append((loss, lr))
    return rows


def of_type(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def finished(events: list[Event]) -> Event:
    """The last `finished` event (a resumed run folder holds one per segment)."""
    ends = of_type(events, "finished")
    assert ends, f"no finished event; last events: {[e.type for e in events[-5:]]}"
    return ends[-1]


@dataclass
class ExitedHere:
    """A trainer run in this process (run_here), in the shape of the Popen it stands in for: it has exited."""

    returncode: int

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode


@dataclass
class TrainerProcess:
    """A trainer subprocess with its run folder; stdout and stderr go to files beside the run folder."""

    run_dir: Path
    proc: subprocess.Popen | ExitedHere
    out_path: Path
    err_path: Path
    drain: threading.Thread | None = None
    """Copies a terminal's output to err_path when stderr is a pseudo-terminal."""

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout: float = RUN_TIMEOUT_S) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
            if self.drain is not None:
                self.drain.join(timeout=10)
            return code
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"trainer in {self.run_dir} still running after {timeout:g} s; stderr:\n{self.stderr[-3000:]}")

    def events(self) -> list[Event]:
        path = self.run_dir / "events.jsonl"
        return read_all(path) if path.is_file() else []

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 60.0) -> list[Event]:
        """Poll the event log until `predicate(events)` holds; fail if the trainer exits first or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            events = self.events()
            if predicate(events):
                return events
            if exited:
                pytest.fail(
                    f"trainer exited ({self.proc.returncode}) before the awaited event; stderr:\n{self.stderr[-3000:]}"
                )
            time.sleep(0.02)
        pytest.fail(f"awaited event did not come within {timeout:g} s; stderr:\n{self.stderr[-3000:]}")

    def wait_for_step(self, step: int, timeout: float = 60.0) -> list[Event]:
        return self.wait_for(lambda events: any(e.type == "step" and e.step >= step for e in events), timeout)

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)


def terminal_to_file(path: Path) -> tuple[int, threading.Thread]:
    """A pseudo-terminal whose output a thread copies to `path`; returns (terminal fd, thread)."""
    controller, terminal = os.openpty()

    def copy() -> None:
        with open(path, "wb") as out:
            while True:
                try:
                    data = os.read(controller, 65536)
                except OSError:  # EIO: every process holding the terminal has closed it
                    break
                if not data:
                    break
                out.write(data)
        os.close(controller)

    thread = threading.Thread(target=copy, name="pty-drain", daemon=True)
    thread.start()
    return terminal, thread


class TrainerLauncher:
    """Starts trainers on the tiny profile with files under `root`; `close()` kills any still running."""

    def __init__(self, root: Path, corpus: Path) -> None:
        self.root, self.corpus = root, corpus
        self.profile = root / "tiny.toml"
        self.profile.write_text(TINY_PROFILE, encoding="utf-8")
        config = root / "config"
        config.mkdir(exist_ok=True)
        # No inherited fault injection; an empty config folder; one thread per trainer.
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("VEGA_")}
        self.env.update(VEGA_CONFIG_DIR=str(config), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.started: list[TrainerProcess] = []

    def command(
        self, run_dir: Path, settings: dict[str, Any], data: Path | None, extra_args: tuple[str, ...]
    ) -> list[str]:
        merged = {key: value for key, value in {**DEFAULT_SETTINGS, **settings}.items() if value is not None}
        argv = [*TRAINER_CORE, "train", "--profile", str(self.profile), "--data", str(data or self.corpus)]
        return [*argv, "--run-dir", str(run_dir), *set_args(merged), *extra_args]

    def start(
        self,
        name: str = "run",
        settings: dict[str, Any] | None = None,
        *extra_args: str,
        env: dict[str, str] | None = None,
        data: Path | None = None,
        run_dir: Path | None = None,
        terminal: bool = False,
    ) -> TrainerProcess:
        """Start a trainer; `settings` are `--set` fields (None removes a default), `extra_args` go last.

        `terminal`: stderr is a pseudo-terminal (as for a person at a shell), copied to the .err file.
        """
        target, (out_path, err_path) = run_dir or self.root / name, self.output_files(name)
        drain = None
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            if terminal:
                err, drain = terminal_to_file(err_path)
            proc = subprocess.Popen(
                self.command(target, settings or {}, data, extra_args),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                env={**self.env, **(env or {})},
            )
            if terminal:
                os.close(err)  # the child holds its own copy; the drain ends when the child closes it
        self.started.append(TrainerProcess(target, proc, out_path, err_path, drain))
        return self.started[-1]

    def run(self, *args: Any, **kwargs: Any) -> TrainerProcess:
        """Like start, but waits for the trainer to exit (its exit code is `proc.returncode`)."""
        trainer = self.start(*args, **kwargs)
        trainer.wait()
        return trainer

    def output_files(self, name: str) -> tuple[Path, Path]:
        """Where the next trainer's stdout and stderr go."""
        number = len(self.started)
        return self.root / f"{name}.{number}.out", self.root / f"{name}.{number}.err"

    def run_here(
        self, name: str = "run", settings: dict[str, Any] | None = None, *extra_args: str, **where: Any
    ) -> TrainerProcess:
        """Like run, through the entry point in this process (run_here): for tests of what a run does, not of its
        process. `where`: env, data and run_dir, as for start."""
        target, (out_path, err_path) = where.get("run_dir") or self.root / name, self.output_files(name)
        argv = self.command(target, settings or {}, where.get("data"), extra_args)[len(TRAINER_CORE) :]
        done = run_here({**self.env, **(where.get("env") or {})}, *argv, cwd=self.root)
        out_path.write_text(done.stdout, encoding="utf-8")
        err_path.write_text(done.stderr, encoding="utf-8")
        self.started.append(TrainerProcess(target, ExitedHere(done.returncode), out_path, err_path))
        return self.started[-1]

    def close(self) -> None:
        for trainer in self.started:
            if trainer.proc.poll() is None:
                trainer.proc.kill()
                trainer.proc.wait()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture
def trainers(tmp_path: Path, corpus: Path) -> Iterator[TrainerLauncher]:
    """Start real trainer subprocesses for one test: `trainers.start(...)` / `trainers.run(...)`."""
    launcher = TrainerLauncher(tmp_path, corpus)
    yield launcher
    launcher.close()


@pytest.fixture
def faults_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open the fault gate in this process: trainers built here fire their [debug] and VEGA_FAULT_* faults."""
    monkeypatch.setenv("VEGA_FAULTS", "1")


@pytest.fixture()
def keep_torch_threads() -> Iterator[None]:
    """build_trainer sets the process's torch thread count from the profile: give the rest of the suite its own back.
    Modules that build trainers in process ask for it with `pytestmark`."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def new_group_trainer(kind: Kind, tmp_path: Path, name: str, *settings: str) -> Any:
    """A tiny two-optimizer Trainer of `kind` ("vocoder" or "vits") built in process on the test voice, its run
    folder `tmp_path/name`."""
    from trainer_core.contract import rundir
    from trainer_core.contract.eventlog import EventWriter
    from trainer_core.engine.control_state import ControlState
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.setup import build_trainer
    from trainer_core.plan import make_plan

    profile = tmp_path / f"{kind}.toml"
    profile.write_text(tiny_profile(kind, data={"cache_dir": str(tmp_path / "cache")}), encoding="utf-8")
    run_dir = tmp_path / name
    plan = make_plan(str(profile), [f"data.path={TEST_VOICE}", *settings], run_dir=run_dir, use_machine_file=False)
    rundir.create_run_dir(run_dir)
    return build_trainer(plan, EventHub(EventWriter(run_dir / rundir.EVENTS)), ControlState(), run_dir)


def new_vits_export(tmp_path: Path, *settings: str) -> Path:
    """An export folder of a tiny vits voice, built in process and never trained (a start model for runs)."""
    from trainer_core.engine.export import export_model

    tmp_path.mkdir(parents=True, exist_ok=True)
    trainer = new_group_trainer("vits", tmp_path, "source", *settings)
    config = {**trainer.task.model_config(), "step": 0, "profile": trainer.profile_toml}
    folder = tmp_path / "source-export"
    export_model(trainer.task.export_module(trainer.module), config, folder)
    return folder


def new_vocoder_trainer(tmp_path: Path, name: str, *settings: str) -> Any:
    """A tiny two-optimizer vocoder Trainer built in process on the test voice, its run folder `tmp_path/name`."""
    return new_group_trainer("vocoder", tmp_path, name, *settings)


@pytest.fixture
def empty_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user config folder (no machine file, no user profiles) and no VEGA_* settings (no injected
    GPUs or faults)."""
    folder = tmp_path / "config"
    (folder / "profiles").mkdir(parents=True)
    for key in [key for key in os.environ if key.startswith("VEGA_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("VEGA_CONFIG_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def piper_voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Piper voice made by Piper's own code (16 kHz, a narrow generator, Piper's full discriminator),
    its voice config beside it, in VOICES/tiny-piper/ (a level below a voices folder); built once per session."""
    from piper_reference import make_small_reference

    checkpoint, _config = make_small_reference(tmp_path_factory.mktemp("voices") / "tiny-piper")
    return checkpoint


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module's in-process models: other tests share this machine's few cores, and
    oversubscription is far slower. Modules ask for it with `pytestmark = pytest.mark.usefixtures(...)`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
