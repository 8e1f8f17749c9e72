"""Names in profiles, files and events stay in their folder (docs/reliability.md).

Each escape goes to the real reader and must be refused with a message naming the file, the field
and the value, with nothing outside written or read. Each has a control: the same name through the
unguarded lower layer does reach outside, so the guard is what stops it. Reads are seen by a bait
file's access time (`Bait`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from trainer_core.contract import rundir
from trainer_core.contract.confined_path import PathEscapeError
from trainer_core.contract.errors import DataError, ProfileError
from trainer_core.contract.init_sources import best_checkpoint, run_data_mode
from trainer_core.contract.profile_loader import resolve_profile
from trainer_core.contract.protocol import SampleEvent
from trainer_core.data.common_voice import list_common_voice
from trainer_core.data.corpus_rows import CorpusOptions
from trainer_core.data.feature_cache import CACHE_FORMAT_VERSION, FeatureCache
from trainer_core.data.parquet_corpus import find_shards
from trainer_core.engine.checkpoint_manager import read_best
from trainer_core.models.onnx_voice import CONFIG_FILENAME, OnnxVoice, start_session
from trainer_core.models.text_frontend import SPECIAL_SYMBOLS
from trainer_core.models.vits.piper_voice_files import PiperExportError, file_stem, language_of
from vega_tui.run_summary import summarize_run
from vega_tui.screens.run_actions import resume_problem
from vega_tui.widgets.checkpoints import locate, scan_run_files
from vega_tui.widgets.profile_list import _entry

REPO = Path(__file__).resolve().parent.parent
BAD_NAMES = {
    "dotdot": "../../x",
    "slash": "a/b",
    "backslash": "a\\b",
    "nul": "a\x00b",
    "escape": "a\x1b[2Jb",
    "newline": "line\nbreak",
    "dot": ".",
    "parent": "..",
    "long": "x" * 201,
}


class Bait:
    """A file outside the folder under test; its access time, set to 1 (1970), shows any read."""

    def __init__(self, path: Path, data: bytes = b"bait") -> None:
        self.path = path
        path.write_bytes(data)
        self.arm()

    def arm(self) -> None:
        # relatime updates an access time older than the change time: the next read shows
        os.utime(self.path, (1, time.time()))

    @property
    def read(self) -> bool:
        return os.stat(self.path).st_atime != 1


def outside_tree(tmp_path: Path) -> tuple[Path, Path]:
    """(the folder under test, a sibling folder outside it)."""
    folder, outside = tmp_path / "folder", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    return folder, outside


# -------------------------------------------------------------------------------------------------
# run.name


def test_run_name_with_dotdot_through_the_cli_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    (work / "text.txt").write_text("some text to read\n" * 20, encoding="utf-8")
    (work / "tiny.toml").write_text('[data]\nmode = "text"\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    argv = [
        sys.executable,
        "-m",
        "trainer_core",
        "train",
        "--profile",
        "tiny.toml",
        "--data",
        "text.txt",
    ]
    done = subprocess.run(
        [*argv, "--set", 'run.name="../../x"'],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    said = '--set run.name="../../x": run.name = "../../x": must be one name, without / or \\'
    assert said in done.stderr
    assert "choose a plain name" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "text.txt", "tiny.toml"]
    # Control: the layer under the guard puts that name's run folder two levels above ./runs.
    escaped = rundir.create_run_dir(work / "runs" / rundir.run_dir_name("../../x"))
    assert escaped.resolve().parent == tmp_path / "a"


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_every_bad_run_name_is_refused_by_the_profile(tmp_path: Path, name: str) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text("", encoding="utf-8")
    shown = json.dumps(name)
    with pytest.raises(ProfileError) as refused:
        resolve_profile(profile, [f"run.name={shown}"], machine_file=None)
    assert f"--set run.name={shown}: run.name = {shown}: must " in str(refused.value)
    # The same rule for a profile file, and in the dashboard's profile list.
    profile.write_text(f"[run]\nname = {shown}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"p\.toml: run\.name = "):
        resolve_profile(profile, machine_file=None)
    entry = _entry(profile, REPO / "profiles", ())
    assert not entry.valid and entry.errors[0].startswith(f"run.name = {shown}: must ")
    with pytest.raises(ProfileError, match="run.name = "):
        rundir.propose_run_dir(tmp_path / "runs", name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]


def test_a_plain_run_name_passes_and_the_run_folder_stays_in_runs(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text("", encoding="utf-8")
    name = "my voice·2"  # spaces and letters beyond ASCII are a name, not a path
    loaded = resolve_profile(profile, [f"run.name={json.dumps(name)}"], machine_file=None)
    assert loaded.profile.run.name == name
    proposed = rundir.propose_run_dir(tmp_path / "runs", name, now=0)
    assert proposed.parent == tmp_path / "runs" and proposed.name.startswith(name)


def test_the_run_folder_guard_refuses_a_link_at_the_proposed_name(tmp_path: Path) -> None:
    runs, outside = outside_tree(tmp_path)
    (runs / rundir.run_dir_name("voice", now=0)).symlink_to(outside)
    said = r"run\.name = 'voice-.*' leads outside .* through a link"
    with pytest.raises(PathEscapeError, match=said):
        rundir.propose_run_dir(runs, "voice", now=0)
    assert list(outside.iterdir()) == []
    # Control: the layer under the guard makes the run's folders in the link's target.
    rundir.create_run_dir(runs / rundir.run_dir_name("voice", now=0))
    assert (outside / rundir.CHECKPOINTS).is_dir()


# -------------------------------------------------------------------------------------------------
# An ONNX export's config.json


def write_graph(path: Path) -> None:
    """A one-node ONNX graph (y = x): enough for onnxruntime to open a session on it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def write_onnx_config(folder: Path, acoustic: str) -> None:
    config = {
        "format": "vega-onnx",
        "version": 1,
        "acoustic": {"file": acoustic},
        "vocoder": None,
        "text": {
            "symbols": [*SPECIAL_SYMBOLS, "a"],
            "units": "chars",
            "lowercase": True,
            "espeak_voice": "en-us",
        },
        "audio": {},
    }
    (folder / CONFIG_FILENAME).write_text(json.dumps(config), encoding="utf-8")


@pytest.mark.parametrize("how", ["dotdot", "absolute", "link"])
def test_an_onnx_config_naming_a_graph_outside_its_folder_is_refused(tmp_path: Path, how: str):
    folder, outside = outside_tree(tmp_path)
    write_graph(outside / "x.onnx")
    bait = Bait(outside / "x.onnx", (outside / "x.onnx").read_bytes())
    name = {
        "dotdot": "../outside/x.onnx",
        "absolute": str(outside / "x.onnx"),
        "link": "acoustic.onnx",
    }[how]
    if how == "link":
        (folder / name).symlink_to(outside / "x.onnx")
    write_onnx_config(folder, name)
    with pytest.raises(PathEscapeError) as refused:
        OnnxVoice.load(folder)
    assert str(refused.value).startswith(f"{folder / CONFIG_FILENAME}: acoustic.file = {name!r} ")
    assert "export the voice again" in str(refused.value) and not bait.read
    # Control: the session starter under the guard opens that very graph outside.
    assert start_session(folder / name) is not None and bait.read


def test_an_onnx_config_naming_its_own_graph_loads(tmp_path: Path) -> None:
    folder, _ = outside_tree(tmp_path)
    write_graph(folder / "acoustic.onnx")
    write_onnx_config(folder, "acoustic.onnx")
    assert OnnxVoice.load(folder).acoustic.get_inputs()[0].name == "x"


# -------------------------------------------------------------------------------------------------
# A run folder's records: best.json, session.json


def test_best_json_naming_a_link_out_of_checkpoints_is_not_followed(tmp_path: Path) -> None:
    run, outside = outside_tree(tmp_path)
    checkpoints = run / rundir.CHECKPOINTS
    checkpoints.mkdir()
    bait = Bait(outside / "stolen.pt")
    (checkpoints / "step-00000001.pt").symlink_to(bait.path)
    record = json.dumps({"path": "step-00000001.pt"})
    (checkpoints / "best.json").write_text(record, encoding="utf-8")
    assert read_best(checkpoints) is None and best_checkpoint(run) is None and not bait.read
    # Control: the plain join of the recorded name reaches the file outside.
    assert (checkpoints / "step-00000001.pt").read_bytes() == b"bait" and bait.read
    (checkpoints / "step-00000001.pt").unlink()
    (checkpoints / "step-00000001.pt").write_bytes(b"mine")  # a real file inside: this run's best
    assert best_checkpoint(run) == checkpoints / "step-00000001.pt"
    assert read_best(checkpoints) is not None


def test_session_json_paths_are_records_that_nothing_opens(tmp_path: Path) -> None:
    run, outside = outside_tree(tmp_path)
    bait = Bait(outside / "profile.toml", b'[run]\nname = "bait"\n')
    session = {
        "run_dir": str(outside),
        "profile": str(bait.path),
        "data_path": str(bait.path),
        "status": "done",
    }
    session["data_mode"] = "text"
    (run / rundir.SESSION).write_text(json.dumps(session), encoding="utf-8")
    (run / rundir.EVENTS).write_text("", encoding="utf-8")
    summary = summarize_run(run)
    assert summary.profile == "profile" and run_data_mode(run) == "text" and not bait.read
    # Control: the probe sees a read of the named file.
    assert Path(summary.profile_path or "").read_text(encoding="utf-8") and bait.read


# -------------------------------------------------------------------------------------------------
# Events the dashboard opens


def test_an_event_path_leading_out_through_a_link_is_refused(tmp_path: Path) -> None:
    run, outside = outside_tree(tmp_path)
    bait = Bait(outside / "01.wav")
    (run / rundir.SAMPLES).mkdir()
    (run / rundir.SAMPLES / "step-00000001").symlink_to(outside)
    event = SampleEvent(step=1, kind="audio", path=str(run / "samples/step-00000001/01.wav"))
    with pytest.raises(PathEscapeError) as refused:
        locate(run, event.path, rundir.SAMPLES)
    said = f"{run / rundir.EVENTS} (a samples file): path = 'step-00000001/01.wav' leads outside"
    assert str(refused.value).startswith(said)
    (run / rundir.CHECKPOINTS).mkdir()
    (run / rundir.CHECKPOINTS / "step-00000001.pt").symlink_to(bait.path)
    facts = scan_run_files(run, [(1, str(run / "checkpoints/step-00000001.pt"))])
    problem = resume_problem(facts, 1, live=False)
    assert problem is not None and "leads outside" in problem and not bait.read
    # Control: the plain join of the recorded path reads the file outside.
    assert (run / "samples/step-00000001/01.wav").read_bytes() == b"bait" and bait.read


@pytest.mark.parametrize("recorded", ["../../outside/01.wav", "/x/samples/step-00000001/01.wav"])
def test_event_paths_are_placed_back_in_the_run_folder(tmp_path: Path, recorded: str) -> None:
    run, _ = outside_tree(tmp_path)
    where = locate(run, recorded, rundir.SAMPLES)
    assert where.resolve().is_relative_to(run / rundir.SAMPLES)
    flat = recorded.replace("step-00000001/", "")
    assert locate(run, flat, rundir.SAMPLES) == run / "samples/01.wav"


# -------------------------------------------------------------------------------------------------
# Corpus tables naming files


def test_a_common_voice_row_naming_a_clip_outside_clips_is_skipped(tmp_path: Path) -> None:
    root, outside = outside_tree(tmp_path)
    bait = Bait(outside / "x.mp3")
    (root / "clips").mkdir()
    rows = ["client_id\tpath\tsentence\tup_votes", "c1\t../../outside/x.mp3\tHello there.\t2"]
    (root / "validated.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    listing = list_common_voice(root, CorpusOptions())
    assert listing is not None and not listing.rows and not bait.read
    reason = listing.problems[0].reason
    assert reason.startswith("line 2: the path '../../outside/x.mp3' holds a '..' part")
    assert reason.endswith("name a file in clips/")
    # Control: the table's name, joined as it stands, is the file outside.
    assert (root / "clips" / "../../outside/x.mp3").read_bytes() == b"bait" and bait.read


def test_a_datasets_state_json_naming_a_file_outside_is_refused(tmp_path: Path) -> None:
    root, outside = outside_tree(tmp_path)
    bait = Bait(outside / "x.arrow")
    (root / "dataset_info.json").write_text("{}", encoding="utf-8")
    state = {"_data_files": [{"filename": "../outside/x.arrow"}]}
    (root / "state.json").write_text(json.dumps(state), encoding="utf-8")
    said = r"state\.json: _data_files\[\]\.filename = '\.\./outside/x\.arrow' holds a '\.\.' part"
    with pytest.raises(DataError, match=said):
        find_shards(root)
    assert not bait.read
    # Control: the listed name joined to the folder is the file outside.
    assert (root / "../outside/x.arrow").read_bytes() == b"bait" and bait.read


# -------------------------------------------------------------------------------------------------
# Files Vega names itself: the feature cache's data file, a Piper export's file names


def test_a_feature_cache_index_naming_a_link_out_is_damaged_not_read(tmp_path: Path) -> None:
    folder, outside = outside_tree(tmp_path)
    params = {"n_mels": 2}
    cache = FeatureCache(folder, params, tmp_path)
    bait = Bait(outside / "data.f32", b"\0" * 16)
    cache.entries_dir.mkdir(parents=True)
    (cache.entries_dir / "data.f32").symlink_to(bait.path)
    index = {
        "format_version": CACHE_FORMAT_VERSION,
        "params": params,
        "data_file": "data.f32",
        "data_bytes": 16,
    }
    cache.index_path.write_text(json.dumps({**index, "entries": {}}), encoding="utf-8")
    again = FeatureCache(folder, params, tmp_path)
    assert again.data_path is None and "names no valid data file ('data.f32')" in again.warnings[0]
    assert not bait.read
    # Control: the index's name, joined to the cache folder, is the file outside.
    assert (cache.entries_dir / "data.f32").read_bytes() == bait.path.read_bytes() and bait.read


def test_a_piper_file_name_from_a_checkpoints_voice_is_one_name() -> None:
    said = r"file name 'en_/X-voice-medium' must be one name, without /"
    with pytest.raises(PiperExportError, match=said):
        file_stem(language_of("en-/x"), "voice", "medium")
    assert file_stem(language_of("en-us"), "voice", "medium") == "en_US-voice-medium"
