"""Profile loading: exact error messages for bad profiles, and layering, paths, overrides, round trips."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from trainer_core.contract.errors import ProfileError
from trainer_core.contract.profile import PATH_FIELDS, Profile, TrainSection, field_descriptions
from trainer_core.contract.profile_loader import (
    find_profile,
    list_profiles,
    load_profile,
    load_profile_dict,
    profile_to_toml,
    repo_profiles_dir,
    resolve_profile,
)

SHIPPED = [
    "demo", "tts-small", "tts-base", "lm-small", "vocoder-small", "vocoder-base", "vits-small", "vits-x_low",
    "vits-low", "vits-medium", "vits-high", "mms-finetune",
]  # fmt: skip


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in tmp_path (so messages show short relative paths) with a private config folder."""
    monkeypatch.setenv("VEGA_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: str | Path, text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def error_of(path: str | Path, overrides: list[str] = (), machine_file="default") -> str:
    with pytest.raises(ProfileError) as caught:
        load_profile(path, overrides, machine_file)
    return str(caught.value)


# ---------------------------------------------------------------- bad profiles: exact messages

BAD_FILES = [
    pytest.param(
        "[train]\nbatch_size = = 4\n",
        "bad.toml: line 2, column 14: invalid TOML: Invalid value",
        id="invalid-toml-line-col",
    ),
    pytest.param(
        "[train]\nbath_size = 8\n",
        "bad.toml: unknown key 'train.bath_size' (did you mean 'train.batch_size'?)",
        id="unknown-key-suggestion",
    ),
    pytest.param(
        "[train]\ncontext_bytes = 128\n",
        "bad.toml: unknown key 'train.context_bytes' (did you mean 'data.context_bytes'?)",
        id="key-in-wrong-section",
    ),
    pytest.param(
        "[trian]\nlr = 1e-3\n",
        "bad.toml: unknown section 'trian' (did you mean 'train'?)",
        id="unknown-section-suggestion",
    ),
    pytest.param(
        "batch_size = 8\n",
        "bad.toml: unknown top-level key 'batch_size' (did you mean 'train.batch_size'?)",
        id="key-outside-section",
    ),
    pytest.param(
        '[train]\nbatch_size = "eight"\n',
        'bad.toml: train.batch_size = "eight": expected an integer',
        id="wrong-type-int",
    ),
    pytest.param(
        "[data]\npath = 5\n",
        "bad.toml: data.path = 5: expected a path (a string)",
        id="wrong-type-path",
    ),
    pytest.param(
        '[logging]\nreport = "maybe"\n',
        'bad.toml: logging.report = "maybe": expected true or false',
        id="wrong-type-bool",
    ),
    pytest.param("audio = 5\n", "bad.toml: audio = 5: expected a table", id="section-not-table"),
    pytest.param(
        "[train]\nbatch_size = -4\n", "bad.toml: train.batch_size = -4: must be >= 1", id="negative-batch-size"
    ),
    pytest.param("[train]\nlr = 0\n", "bad.toml: train.lr = 0: must be > 0", id="lr-zero"),
    pytest.param(
        "[train]\nwarmup_steps = 100\nmax_steps = 50\n",
        "bad.toml: [train] warmup_steps (100) must be shorter than max_steps (50)",
        id="warmup-not-below-max-steps",
    ),
    pytest.param(
        "[model]\nhidden = 256\nheads = 3\n",
        "bad.toml: [model] heads (3) must divide hidden (256)",
        id="heads-do-not-divide-hidden",
    ),
    pytest.param(
        "[audio]\nn_fft = 1024\nwin_length = 2048\n",
        "bad.toml: [audio] win_length (2048) must not exceed n_fft (1024)",
        id="win-length-over-n-fft",
    ),
    pytest.param(
        '[compute]\nmode = "gpux"\n',
        "bad.toml: compute.mode = \"gpux\": must be one of 'gpu', 'cpu' or 'mixed'",
        id="not-a-choice",
    ),
    pytest.param(
        "[train]\nbetas = [0.9]\n",
        "bad.toml: train.betas = [0.9]: too few items (item 1 is missing)",
        id="tuple-too-short",
    ),
    pytest.param('[run]\nname = ""\n', 'bad.toml: run.name = "": must not be empty', id="empty-name"),
    pytest.param(
        "extends = 3\n", "bad.toml: extends = 3: expected a file name, relative to this profile", id="extends-type"
    ),
]


@pytest.mark.parametrize("text, message", BAD_FILES)
def test_bad_profile_file_message(text: str, message: str) -> None:
    write("bad.toml", text)
    assert error_of("bad.toml") == message


def test_unknown_key_without_close_match_lists_the_section_keys() -> None:
    write("bad.toml", "[train]\nzzz = 1\n")
    valid = ", ".join(TrainSection.model_fields)
    assert error_of("bad.toml") == f"bad.toml: unknown key 'train.zzz' (valid keys in [train]: {valid})"


def test_several_problems_one_per_line_under_a_first_line() -> None:
    write("bad.toml", "[train]\nbatch_size = -4\nbath_size = 3\n[model]\nheads = 3\n")
    assert error_of("bad.toml") == (
        "invalid profile bad.toml (3 problems):\n"
        "  bad.toml: [model] heads (3) must divide hidden (256)\n"
        "  bad.toml: train.batch_size = -4: must be >= 1\n"
        "  bad.toml: unknown key 'train.bath_size' (did you mean 'train.batch_size'?)"
    )


def test_missing_profile_file() -> None:
    assert error_of("nope.toml") == "nope.toml: file not found"


def test_extends_missing_parent_names_both_files() -> None:
    write("child.toml", 'extends = "nope.toml"\n')
    assert error_of("child.toml") == 'child.toml: extends = "nope.toml": parent file not found: nope.toml'


def test_extends_cycle_shows_the_chain() -> None:
    write("a.toml", 'extends = "b.toml"\n')
    write("b.toml", 'extends = "a.toml"\n')
    assert error_of("a.toml") == "b.toml: extends cycle: a.toml -> b.toml -> a.toml"


def test_extends_itself_is_a_cycle() -> None:
    write("a.toml", 'extends = "./a.toml"\n')
    assert error_of("a.toml") == "a.toml: extends cycle: a.toml -> a.toml"


def test_invalid_toml_in_a_parent_names_the_parent() -> None:
    write("base/parent.toml", "[train\n")
    write("child.toml", 'extends = "base/parent.toml"\n')
    message = "base/parent.toml: line 1, column 7: invalid TOML: Expected ']' at the end of a table declaration"
    assert error_of("child.toml") == message


def test_error_in_parent_is_attributed_to_the_parent() -> None:
    write("parent.toml", "[train]\nbatch_size = -4\n")
    write("child.toml", 'extends = "parent.toml"\n[train]\nlr = 1e-3\n')
    assert error_of("child.toml") == "parent.toml: train.batch_size = -4: must be >= 1"


def test_child_fixing_a_parent_value_is_valid() -> None:
    write("parent.toml", "[model]\nheads = 3\n")
    write("child.toml", 'extends = "parent.toml"\n[model]\nhidden = 384\n')
    assert load_profile("child.toml").model.heads == 3


def test_set_without_equals() -> None:
    write("ok.toml", "")
    message = "--set train.lr: expected SECTION.KEY=VALUE (for example --set train.lr=1e-4)"
    assert error_of("ok.toml", ["train.lr"]) == message


def test_set_without_section() -> None:
    write("ok.toml", "")
    assert error_of("ok.toml", ["lr=1e-4"]) == "--set lr=1e-4: 'lr' is not SECTION.KEY (for example train.batch_size)"


def test_set_invalid_value_names_the_set_item() -> None:
    write("ok.toml", "")
    message = "--set train.batch_size=-1: train.batch_size = -1: must be >= 1"
    assert error_of("ok.toml", ["train.batch_size=-1"]) == message


def test_set_unknown_key_names_the_set_item() -> None:
    write("ok.toml", "")
    message = "--set train.bath_size=4: unknown key 'train.bath_size' (did you mean 'train.batch_size'?)"
    assert error_of("ok.toml", ["train.bath_size=4"]) == message


def test_set_breaking_a_cross_field_rule_is_blamed() -> None:
    write("ok.toml", "[model]\nhidden = 256\nheads = 4\n")
    message = "--set model.heads=3: [model] heads (3) must divide hidden (256)"
    assert error_of("ok.toml", ["train.lr=1e-3", "model.heads=3"]) == message


def test_machine_file_error_names_the_machine_file() -> None:
    write("ok.toml", "")
    write("config/machine.toml", "[train]\nbatch_size = 0\n")
    assert error_of("ok.toml") == "machine file config/machine.toml: train.batch_size = 0: must be >= 1"


def test_machine_file_invalid_toml_names_the_machine_file() -> None:
    write("ok.toml", "")
    write("config/machine.toml", "[compute]\ndevice = cuda:1\n")
    assert error_of("ok.toml") == "machine file config/machine.toml: line 2, column 10: invalid TOML: Invalid value"


def test_machine_file_cannot_extend() -> None:
    write("ok.toml", "")
    write("config/machine.toml", 'extends = "ok.toml"\n')
    message = "machine file config/machine.toml: the machine file cannot use extends; put its settings in it directly"
    assert error_of("ok.toml") == message


def test_explicit_machine_file_must_exist() -> None:
    write("ok.toml", "")
    assert error_of("ok.toml", machine_file=Path("elsewhere.toml")) == "machine file elsewhere.toml: file not found"


def test_find_profile_unknown_name_lists_where_it_looked() -> None:
    with pytest.raises(ProfileError) as caught:
        find_profile("nope")
    message = str(caught.value)
    assert message.startswith("no profile file or name 'nope' (looked in: ")
    assert str(Path("config/profiles").absolute()) in message and str(repo_profiles_dir()) in message
    assert (
        "available: demo, lm-small, mms-finetune, tts-base, tts-small, vits-high, vits-low, vits-medium, "
        "vits-small, vits-x_low, vocoder-base, vocoder-small)"
    ) in message


# ---------------------------------------------------------------- good profiles


def test_extends_deep_merges_and_paths_stay_relative_to_their_file(tmp_path: Path) -> None:
    write("base/parent.toml", '[data]\npath = "corpus"\nval_fraction = 0.2\n[train]\nlr = 1e-3\nepochs = 7\n')
    write("jobs/child.toml", 'extends = "../base/parent.toml"\n[run]\nruns_dir = "out"\n[train]\nlr = 5e-4\n')
    loaded = resolve_profile("jobs/child.toml")
    profile = loaded.profile
    assert profile.data.path == tmp_path / "base" / "corpus"
    assert profile.run.runs_dir == tmp_path / "jobs" / "out"
    assert (profile.train.lr, profile.train.epochs, profile.data.val_fraction) == (5e-4, 7, 0.2)
    assert profile.extends is None
    assert loaded.files == (tmp_path / "base" / "parent.toml", tmp_path / "jobs" / "child.toml")
    assert loaded.sources == ("base/parent.toml", "jobs/child.toml")


def test_chain_of_three_applies_in_order() -> None:
    write("a.toml", "[train]\nepochs = 1\nlr = 1e-3\nbatch_size = 2\n")
    write("b.toml", 'extends = "a.toml"\n[train]\nepochs = 2\nlr = 2e-3\n')
    write("c.toml", 'extends = "b.toml"\n[train]\nepochs = 3\n')
    train = load_profile("c.toml").train
    assert (train.epochs, train.lr, train.batch_size) == (3, 2e-3, 2)


def test_absolute_and_home_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write("p.toml", f'[data]\npath = "~/voice"\ncache_dir = "{tmp_path / "abs" / "cache"}"\n')
    data = load_profile("p.toml").data
    assert data.path == tmp_path / "home" / "voice"
    assert data.cache_dir == tmp_path / "abs" / "cache"


def test_machine_file_applies_before_set(tmp_path: Path) -> None:
    write("p.toml", "[train]\nbatch_size = 8\nlr = 1e-3\n")
    write("config/machine.toml", '[train]\nbatch_size = 32\nlr = 2e-4\n[data]\ncache_dir = "cache"\n')
    loaded = resolve_profile("p.toml", ["train.batch_size=4"])
    assert (loaded.profile.train.batch_size, loaded.profile.train.lr) == (4, 2e-4)
    assert loaded.profile.data.cache_dir == tmp_path / "config" / "cache"
    assert loaded.sources == ("p.toml", "machine file config/machine.toml", "--set train.batch_size=4")


def test_machine_file_can_be_skipped_or_named(tmp_path: Path) -> None:
    write("p.toml", "")
    write("config/machine.toml", "[train]\nbatch_size = 32\n")
    write("other.toml", "[train]\nbatch_size = 64\n")
    assert load_profile("p.toml", machine_file=None).train.batch_size == 8
    assert load_profile("p.toml", machine_file=tmp_path / "other.toml").train.batch_size == 64


def test_set_value_types(tmp_path: Path) -> None:
    write("p.toml", "")
    profile = load_profile(
        "p.toml",
        [
            "train.lr=1e-4",
            'data.mode="text"',
            'sample.prompts=["a", "b"]',
            "data.path=corpus/x",
            "compute.device=cuda:1",
            "logging.tensorboard=true",
            "run.name=2024",
            "train.betas=[0.8, 0.9]",
        ],
    )
    assert profile.train.lr == 1e-4 and profile.data.mode == "text"
    assert profile.sample.prompts == ["a", "b"]
    assert profile.data.path == tmp_path / "corpus" / "x"
    assert profile.compute.device == "cuda:1"
    assert profile.logging.tensorboard is True
    assert profile.run.name == "2024"
    assert profile.train.betas == (0.8, 0.9)


def test_set_paths_resolve_against_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write("profiles/p.toml", '[data]\npath = "in-profile"\n')
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert load_profile("../profiles/p.toml").data.path == tmp_path / "profiles" / "in-profile"
    assert load_profile("../profiles/p.toml", ["data.path=mine"]).data.path == tmp_path / "work" / "mine"


def test_load_profile_dict_uses_the_same_rules(tmp_path: Path) -> None:
    profile = load_profile_dict({"data": {"path": "d"}, "train": {"lr": 1e-3}}, base_dir=tmp_path / "b")
    assert profile.data.path == tmp_path / "b" / "d" and profile.train.lr == 1e-3
    write("b/parent.toml", "[train]\nepochs = 2\nlr = 5e-3\n")
    child = load_profile_dict({"extends": "parent.toml", "train": {"lr": 1e-3}}, base_dir=tmp_path / "b")
    assert (child.train.epochs, child.train.lr) == (2, 1e-3)
    with pytest.raises(ProfileError) as caught:
        load_profile_dict({"train": {"batch_size": 0}}, source="dashboard form")
    assert str(caught.value) == "dashboard form: train.batch_size = 0: must be >= 1"


def test_round_trip_through_toml(tmp_path: Path) -> None:
    write("p.toml", '[data]\npath = "d"\n[train]\nmax_steps = 500\ntarget_hours = 1.5\n')
    write("config/machine.toml", "[debug]\noom_at_steps = [3, 5]\n")
    original = load_profile("p.toml", ['sample.sentences=["Hi."]', "compute.device=cpu"])
    for describe in (False, True):
        text = profile_to_toml(original, describe=describe)
        write(tmp_path / "again.toml", text)
        assert load_profile("again.toml", machine_file=None) == original
    assert "extends" not in profile_to_toml(original)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_validates_and_round_trips(name: str, tmp_path: Path) -> None:
    profile = load_profile(find_profile(name))
    write(tmp_path / "copy.toml", profile_to_toml(profile))
    assert load_profile("copy.toml") == profile


def test_shipped_profiles_have_what_they_promise() -> None:
    demo = load_profile(find_profile("demo"))
    assert demo.data.path == repo_profiles_dir().parent / "trainer_core" / "demo" / "voice"
    assert demo.run.runs_dir == repo_profiles_dir().parent / "runs"
    assert (demo.data.mode, demo.compute.mode, demo.train.batch_size) == ("auto", "mixed", 8)
    base = load_profile(find_profile("tts-base"))
    assert (base.model.hidden, base.model.encoder_layers, base.model.decoder_layers) == (512, 6, 6)
    assert (base.train.batch_size, base.train.lr, base.train.checkpoint_every_epochs) == (16, 1e-4, 5)
    assert (base.audio.n_fft, base.audio.hop_length, base.audio.n_mels, base.audio.log_floor) == (1024, 256, 80, 1e-5)
    lm = load_profile(find_profile("lm-small"))
    assert (lm.data.mode, lm.model.kind, lm.data.context_bytes, lm.train.lr) == ("text", "lm", 256, 6e-4)


def test_shipped_profiles_start_with_a_comment() -> None:
    for name in SHIPPED:
        assert find_profile(name).read_text(encoding="utf-8").startswith("# ")


def test_find_profile_by_path_and_name_and_user_folder_shadows(tmp_path: Path) -> None:
    write("mine.toml", "")
    assert find_profile("mine.toml") == Path("mine.toml")
    assert find_profile("demo") == find_profile("demo.toml") == repo_profiles_dir() / "demo.toml"
    user_demo = write(tmp_path / "config/profiles/demo.toml", "[train]\nepochs = 1\n")
    assert find_profile("demo") == user_demo
    names = [path.stem for path in list_profiles()]
    assert names == sorted(names) and set(SHIPPED) <= set(names)
    assert user_demo in list_profiles()


def test_every_field_has_a_description() -> None:
    descriptions = field_descriptions()
    text = profile_to_toml(Profile(), describe=True)
    for section_name, section in Profile.model_fields.items():
        if section_name == "extends":
            continue
        assert section.description and f"# {section.description}\n[{section_name}]" in text
        for key in section.annotation.model_fields:
            assert descriptions[f"{section_name}.{key}"], f"{section_name}.{key} has no description"
            assert f"# {descriptions[f'{section_name}.{key}']}\n" in text
    assert tomllib.loads(text)


def test_path_fields_exist_in_the_schema() -> None:
    for section, key in PATH_FIELDS:
        assert key in Profile.model_fields[section].annotation.model_fields


def test_tf32_is_on_by_default_and_a_non_bool_names_the_field() -> None:
    write("p.toml", "[train]\nbatch_size = 4\n")
    assert load_profile("p.toml").train.tf32 is True
    assert load_profile("p.toml", ["train.tf32=false"]).train.tf32 is False
    write("bad.toml", '[train]\ntf32 = "maybe"\n')
    assert "train.tf32" in error_of("bad.toml")
