"""`trainer-core profile validate/show/list` run as real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trainer_core.contract.profile_loader import load_profile, repo_profiles_dir

SHIPPED_FILES = sorted(str(path) for path in repo_profiles_dir().glob("*.toml"))


@pytest.fixture
def cli(tmp_path: Path):
    """Run `python -m trainer_core ARGS` in tmp_path with a private config folder."""
    env = {**os.environ, "VEGA_CONFIG_DIR": str(tmp_path / "config")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "trainer_core", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def test_validate_shipped_profiles(cli) -> None:
    result = cli("profile", "validate", *SHIPPED_FILES, "demo")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"ok  {name}" for name in [*SHIPPED_FILES, "demo"]]
    assert result.stderr == ""


def test_validate_reports_each_bad_file_and_exits_2(cli, tmp_path: Path) -> None:
    (tmp_path / "good.toml").write_text("[train]\nbatch_size = 4\n")
    (tmp_path / "bad.toml").write_text("[train]\nbatch_size = -4\n")
    (tmp_path / "broken.toml").write_text("[train\n")
    result = cli("profile", "validate", "good.toml", "bad.toml", "broken.toml")
    assert result.returncode == 2
    assert result.stdout == "ok  good.toml\n"
    assert result.stderr.splitlines() == [
        "error: bad.toml: train.batch_size = -4: must be >= 1",
        "error: broken.toml: line 1, column 7: invalid TOML: Expected ']' at the end of a table declaration",
    ]
    assert "Traceback" not in result.stderr


def test_debug_before_the_command_shows_the_traceback(cli, tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[train]\nlr = 0\n")
    result = cli("--debug", "profile", "show", "bad.toml")
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().endswith("error: bad.toml: train.lr = 0: must be > 0")


def test_show_prints_valid_toml_equal_to_the_loaded_profile(cli, tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "machine.toml").write_text("[train]\nbatch_size = 2\nepochs = 3\n")
    result = cli("profile", "show", "tts-base", "--set", "train.epochs=9", "--set", "data.path=voice")
    assert result.returncode == 0, result.stderr
    shown = tomllib.loads(result.stdout)
    assert shown["train"]["epochs"] == 9 and shown["train"]["batch_size"] == 2
    assert shown["data"]["path"] == str(tmp_path / "voice")
    assert shown["model"]["hidden"] == 512 and shown["audio"]["n_mels"] == 80
    assert "extends" not in shown
    assert "#   machine file config/machine.toml\n#   --set train.epochs=9\n" in result.stdout
    (tmp_path / "shown.toml").write_text(result.stdout)
    original = repo_profiles_dir() / "tts-base.toml"
    overrides = ["train.epochs=9", f"data.path={tmp_path / 'voice'}"]
    expected = load_profile(original, overrides, tmp_path / "config" / "machine.toml")
    assert load_profile(tmp_path / "shown.toml", machine_file=None) == expected


def test_show_no_machine_file_and_describe(cli, tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "machine.toml").write_text("[train]\nbatch_size = 2\n")
    result = cli("profile", "show", "demo", "--no-machine-file", "--describe")
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(result.stdout)["train"]["batch_size"] == 8
    assert "# Micro-batch size (items per forward pass).\nbatch_size = 8\n" in result.stdout
    assert "machine file" not in result.stdout


def test_show_bad_set_exits_2_without_traceback(cli) -> None:
    result = cli("profile", "show", "demo", "--set", "train.batch_size=-1")
    assert result.returncode == 2
    assert result.stderr == "error: --set train.batch_size=-1: train.batch_size = -1: must be >= 1\n"
    assert result.stdout == ""


def test_list_names_the_shipped_profiles(cli) -> None:
    result = cli("profile", "list")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert {"demo", "tts-small", "tts-base", "lm-small"} <= set(names)
