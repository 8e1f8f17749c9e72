"""Security: files and commands from someone else must not run code on this machine.

- A checkpoint carrying a malicious pickle (one that would run a shell command) is refused with a clear
  message by every entry point that reads checkpoints, and the command never runs.
- The code never loads with torch.load lacking weights_only=True, never starts a shell and never evals.
- Profiles are TOML data: Python inside one is a string or a validation error, never executed.
- The control socket lives in the run folder with mode 0600 and refuses connections from other users.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import FAULTS_ON, REPO, TRAINER_CORE, TrainerLauncher, run_here
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.profile_loader import load_profile
from trainer_core.engine.checkpoint_manager import new_checkpoint_state
from vega_tui import runner

SCANNED = ("trainer_core", "vega_tui", "bench", "scripts")
REFUSED = "it contains objects that are not plain tensors/containers and was refused for safety"
NOBODY = 65534
# Pickles allowed only between the dashboard and the child it spawned, over private pipes, never from a file.
PRIVATE_PIPE_PICKLES = {"vega_tui/history_worker.py"}


class ShellPayload:
    """Unpickling this runs `touch MARKER` through os.system: what a malicious checkpoint would carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def malicious_checkpoint(path: Path, marker: Path) -> Path:
    """A file laid out like a Vega checkpoint, with the payload hidden in its `extra` entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"x": ShellPayload(marker)}
    state = new_checkpoint_state(model={"w": torch.zeros(2)}, step=5, epoch=0, rng={}, extra=payload)
    torch.save(state, path)
    return path


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainer_core", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


# ---------------------------------------------------------------------------------------------------------------
# Malicious checkpoints


def test_the_payload_is_live_when_loaded_unsafely(tmp_path: Path) -> None:
    """The control: without weights_only the same file does run its command."""
    marker = tmp_path / "ran"
    torch.load(malicious_checkpoint(tmp_path / "evil.pt", marker), weights_only=False)
    assert marker.exists()


def test_train_resume_from_a_malicious_checkpoint_is_refused(trainers: TrainerLauncher) -> None:
    marker = trainers.root / "payload-ran"
    evil = malicious_checkpoint(trainers.root / "stolen" / "checkpoints" / "step-00000005.pt", marker)
    argv = trainers.command(trainers.root / "unused", {}, None, ("--resume", str(evil)))
    argv = argv[: argv.index("--run-dir")] + argv[argv.index("--run-dir") + 2 :]  # the checkpoint's own run folder
    done = run_here(trainers.env, *argv[len(TRAINER_CORE) :], cwd=trainers.root)
    assert done.returncode == 2, done.stderr
    assert f"error: checkpoint {evil}: {REFUSED}" in done.stderr
    assert "only resume from checkpoints Vega wrote" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()
    events = [json.loads(line) for line in (evil.parent.parent / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["type"] == "step"], "training must not start"
    assert [e["status"] for e in events if e["type"] == "finished"] == ["failed"]
    assert sorted(p.name for p in evil.parent.iterdir()) == ["step-00000005.pt"]


def test_resume_auto_refuses_a_run_folder_whose_only_checkpoint_is_malicious(trainers: TrainerLauncher) -> None:
    marker = trainers.root / "payload-ran"
    run_dir = trainers.root / "run"
    malicious_checkpoint(run_dir / "checkpoints" / "step-00000005.pt", marker)
    run = trainers.run_here("run", {}, "--resume", "auto")
    assert run.proc.returncode == 2
    assert "error: no checkpoint in" in run.stderr and "refused for safety" in run.stderr
    assert not marker.exists()
    assert not [e for e in run.events() if e.type == "step"]


def test_synth_from_a_malicious_checkpoint_is_refused(tmp_path: Path) -> None:
    marker, out = tmp_path / "payload-ran", tmp_path / "hello.wav"
    evil = malicious_checkpoint(tmp_path / "run" / "checkpoints" / "step-00000005.pt", marker)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    done = cli("synth", "--checkpoint", str(evil), "--text", "Hello.", "--out", str(out), env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert f"error: checkpoint {evil}: {REFUSED}" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists() and not out.exists()


# ---------------------------------------------------------------------------------------------------------------
# The code itself: safe loading, no shell, no eval


def python_files() -> Iterator[Path]:
    for folder in SCANNED:
        yield from sorted((REPO / folder).rglob("*.py"))


def dotted(node: ast.AST) -> str:
    """`torch.load` for the expression torch.load; "" for anything that is not a plain dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def keyword_is_true(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def unsafe_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, why) for every call that could run code from data."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        if name in ("torch.load", "torch.serialization.load") and not keyword_is_true(node, "weights_only"):
            yield node.lineno, f"{name} without weights_only=True"
        elif name in ("eval", "exec", "os.system", "os.popen", "pickle.load", "pickle.loads", "marshal.loads"):
            yield node.lineno, f"{name}(...)"
        elif any(
            k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
            for k in node.keywords
        ):
            yield node.lineno, f"{name}(..., shell=...)"


def test_no_unsafe_load_shell_or_eval_anywhere_in_the_code() -> None:
    files = list(python_files())
    assert len(files) > 50, "the scan must see the project's code"
    found = [
        f"{path.relative_to(REPO)}:{line}: {why}"
        for path in files
        for line, why in unsafe_calls(ast.parse(path.read_text(encoding="utf-8")))
        if not (str(path.relative_to(REPO)) in PRIVATE_PIPE_PICKLES and why.startswith("pickle."))
    ]
    assert found == []
    loads = sum("torch.load(" in path.read_text(encoding="utf-8") for path in files)
    assert loads >= 1, "the checkpoint loader itself must have been scanned"


def test_the_scan_catches_what_it_looks_for() -> None:
    code = (
        "import os, torch, subprocess\ntorch.load(p)\ntorch.load(p, weights_only=False)\n"
        "torch.load(p, weights_only=True)\neval(s)\nexec(s)\nos.system(s)\nsubprocess.run(s, shell=True)\n"
        "model.eval()\nsubprocess.run([a], shell=False)\n"
    )
    assert [line for line, _ in unsafe_calls(ast.parse(code))] == [2, 3, 5, 6, 7, 8]


# ---------------------------------------------------------------------------------------------------------------
# Profiles are data


PYTHON_IN_A_STRING = """\
[run]
name = "__import__('os').system('touch pwned')"
"""
PYTHON_AS_TOML = """\
import os
os.system("touch pwned")
"""
PYTHON_AS_A_VALUE = """\
[run]
seed = __import__("os").system("touch pwned")
"""


def test_python_in_a_profile_is_only_a_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "p.toml"
    path.write_text(PYTHON_IN_A_STRING, encoding="utf-8")
    assert load_profile(path, machine_file=None).run.name == "__import__('os').system('touch pwned')"
    for text in (PYTHON_AS_TOML, PYTHON_AS_A_VALUE):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ProfileError, match="invalid TOML"):
            load_profile(path, machine_file=None)
    path.write_text(PYTHON_IN_A_STRING, encoding="utf-8")
    with pytest.raises(ProfileError, match="run.seed"):
        load_profile(path, ["run.seed=\"__import__('os').system('touch pwned')\""], machine_file=None)
    assert not (tmp_path / "pwned").exists()


def test_python_profiles_through_the_cli_never_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")} | {"VEGA_CONFIG_DIR": str(tmp_path)}
    (tmp_path / "evil.py").write_text(PYTHON_AS_TOML, encoding="utf-8")
    (tmp_path / "child.toml").write_text('extends = "evil.py"\n', encoding="utf-8")
    (tmp_path / "code.toml").write_text(PYTHON_AS_A_VALUE, encoding="utf-8")
    for name in ("evil.py", "child.toml", "code.toml"):
        done = cli("profile", "validate", str(tmp_path / name), env=env, cwd=tmp_path)
        assert done.returncode == 2 and "invalid TOML" in done.stdout + done.stderr, (name, done.stdout, done.stderr)
    setting = cli(
        "profile", "show", "demo", "--set", "run.seed=__import__('os').system('touch pwned')", env=env, cwd=tmp_path
    )
    assert setting.returncode == 2 and "run.seed" in setting.stderr
    assert not (tmp_path / "pwned").exists()


# ---------------------------------------------------------------------------------------------------------------
# The control socket


CONNECT_AS_OTHER_USER = """\
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect_error": exc.errno}))
    raise SystemExit(0)
try:
    s.sendall(b'{"cmd": "stop", "id": "intruder"}\\n')
except BrokenPipeError:
    pass  # the trainer may refuse (reply, then close) before our request is even sent
print(json.dumps({"reply": s.makefile().readline()}))
"""


@pytest.fixture
def open_run(corpus: Path) -> Iterator[TrainerLauncher]:
    """A launcher whose run folders another user can reach (pytest's own tmp folders are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="vega-sec-", dir="/tmp"))
    root.chmod(0o755)
    launcher = TrainerLauncher(root, corpus)
    yield launcher
    launcher.close()
    subprocess.run(["rm", "-rf", str(root)], check=False)


def connect_as(uid: int, path: Path) -> dict[str, Any]:
    done = subprocess.run(
        ["/usr/bin/python3", "-c", CONNECT_AS_OTHER_USER, str(path)],
        user=uid,
        group=uid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(os.geteuid() != 0 or not hasattr(socket, "SO_PEERCRED"), reason="needs root to act as another user")
def test_the_control_socket_is_private_and_refuses_another_user(open_run: TrainerLauncher) -> None:
    trainer = open_run.start("run", {"train.max_steps": 100000}, env={**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.05"})
    trainer.wait_for_step(2)
    path = trainer.run_dir / "control.sock"
    deadline = time.monotonic() + 60
    while not runner.socket_ready(trainer.run_dir):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    info = path.stat()
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    assert path.parent == trainer.run_dir
    # The file mode alone keeps another user out...
    assert connect_as(NOBODY, path) == {"connect_error": 13}
    # ...and were the mode loosened, the trainer would still refuse them by their peer credentials.
    path.chmod(0o666)
    reply = json.loads(connect_as(NOBODY, path)["reply"])
    assert reply["ok"] is False and f"comes from uid {NOBODY}" in reply["error"]
    assert runner.socket_ready(trainer.run_dir) and trainer.proc.poll() is None
    assert not [e for e in trainer.events() if e.type == "command_ack"]
    assert runner.send(trainer.run_dir, "stop").ok
    assert trainer.wait() == 0
    assert [e.status for e in trainer.events() if e.type == "finished"] == ["stopped"]
