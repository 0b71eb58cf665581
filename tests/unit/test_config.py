"""Settings: defaults < config file < environment < flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from herald.common.config import describe, load_settings
from herald.common.errors import InvalidArgumentError


@dataclass
class DemoSettings:
    port: int = 1
    ratio: float = 0.5
    enabled: bool = False
    name: str = "x"
    nodes: list[str] = field(default_factory=list)
    secret_key: str = ""


def test_layers_override_in_order(tmp_path: Path) -> None:
    config = tmp_path / "herald.toml"
    config.write_text('[demo]\nport = 2\nname = "from-file"\nnodes = ["a:1"]\n')
    environ = {"HERALD_DEMO_PORT": "3", "HERALD_DEMO_ENABLED": "yes", "HERALD_DEMO_NODES": "b:1, c:2"}
    settings = load_settings(DemoSettings, "demo", config_file=config, environ=environ, overrides={"ratio": 0.9})
    assert settings == DemoSettings(port=3, ratio=0.9, enabled=True, name="from-file", nodes=["b:1", "c:2"])
    assert load_settings(DemoSettings, "demo", environ={}, overrides={"port": None}).port == 1


def test_bad_values_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="port='many'"):
        load_settings(DemoSettings, "demo", environ={"HERALD_DEMO_PORT": "many"})
    with pytest.raises(InvalidArgumentError, match="enabled"):
        load_settings(DemoSettings, "demo", environ={"HERALD_DEMO_ENABLED": "maybe"})
    config = tmp_path / "bad.toml"
    config.write_text("[demo]\nprot = 2\n")
    with pytest.raises(InvalidArgumentError, match="prot"):
        load_settings(DemoSettings, "demo", config_file=config, environ={})
    with pytest.raises(InvalidArgumentError, match="unknown setting"):
        load_settings(DemoSettings, "demo", environ={}, overrides={"nope": 1})


def test_describe_masks_secrets() -> None:
    text = describe(DemoSettings(secret_key="hunter2"))
    assert "hunter2" not in text
    assert "secret_key = ****" in text
