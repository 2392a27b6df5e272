"""The training config file: TOML and YAML, every knob, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from codegym.train import ConfigError, TrainConfig, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_loads_and_sets_its_values() -> None:
    cfg = load_config(ROOT / "configs" / "grpo_tiny.toml")
    assert cfg.optim.lr == 2e-4 and cfg.grpo.group_size == 8
    assert cfg.sampling.stop == ("\n\n",) and cfg.run.mode == "sync"
    assert cfg.env.options == {"style": "continuation"}


def test_yaml_and_toml_give_the_same_config(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('[run]\nsteps = 7\nmode = "async"\n[grpo]\nkl_coef = 0.05\n')
    (tmp_path / "a.yaml").write_text("run:\n  steps: 7\n  mode: async\ngrpo:\n  kl_coef: 0.05\n")
    a, b = load_config(tmp_path / "a.toml"), load_config(tmp_path / "a.yaml")
    assert a == b and a.run.steps == 7 and a.grpo.kl_coef == 0.05
    assert load_config_empty(tmp_path) == TrainConfig()


def load_config_empty(tmp_path: Path) -> TrainConfig:
    (tmp_path / "empty.yaml").write_text("")
    return load_config(tmp_path / "empty.yaml")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"grpo": {"clip_epz": 0.2}}, "grpo.clip_epz"),
        ({"run": {"mode": "fast"}}, "run.mode"),
        ({"optim": {"lr": -1}}, "optim.lr"),
        ({"grpo": {"group_size": 1}}, "grpo.group_size"),
        ({"tasks": {"train_seed": 0, "heldout_seed": 0}}, "held-out"),
        ({"sandbox": {"tier": "docker"}}, "sandbox.tier"),
    ],
)
def test_bad_values_name_the_field(data: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match="invalid training config") as e:
        parse_config(data, "my.toml")
    assert needle in str(e.value) and "my.toml" in str(e.value)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml")
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"\.toml, \.yaml"):
        load_config(tmp_path / "c.json")
    (tmp_path / "broken.toml").write_text("[run\nsteps=")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(tmp_path / "broken.toml")


def test_digest_covers_what_changes_weights_only() -> None:
    base = parse_config({})
    assert (
        parse_config({"run": {"steps": 99}, "checkpoint": {"dir": "x"}}).digest() == base.digest()
    )
    assert parse_config({"optim": {"lr": 0.5}}).digest() != base.digest()
    assert parse_config({"run": {"seed": 1}}).digest() != base.digest()
