"""The operator's settings and its command: HERALD_ADMIN_URL or HERALD_OPERATOR_* variables, flags
over both, bad values refused; `herald operator --help` works without starting anything."""

from __future__ import annotations

import subprocess

import pytest
from herald.common.errors import InvalidArgumentError
from herald_operator.settings import load_settings

from tests.conftest import VENV_BIN, service_env


def test_admin_url_comes_from_herald_admin_url_unless_the_operator_variable_or_a_flag_says_otherwise() -> None:
    env = {"HERALD_ADMIN_URL": "herald://lookup:6660", "HERALD_OPERATOR_RESYNC_INTERVAL": "5",
           "HERALD_OPERATOR_NAMESPACES": "a,b"}
    settings = load_settings(environ=env)
    assert (settings.admin_url, settings.resync_interval, settings.namespaces) == ("herald://lookup:6660", 5.0,
                                                                                  ["a", "b"])
    env["HERALD_OPERATOR_ADMIN_URL"] = "broker:6661"
    assert load_settings(environ=env).admin_url == "broker:6661"
    assert load_settings(overrides={"admin_url": "flag:1"}, environ=env).admin_url == "flag:1"


@pytest.mark.parametrize("name", ["resync_interval", "retry_delay", "admin_timeout"])
def test_intervals_must_be_positive(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        load_settings(overrides={name: 0}, environ={})


def test_operator_command_help() -> None:
    done = subprocess.run([str(VENV_BIN / "herald"), "operator", "--help"], capture_output=True, text=True,
                          env=service_env(), timeout=60, check=True)
    for flag in ("--url", "--namespace", "--resync-interval", "--standalone", "--health-port", "--metrics-port"):
        assert flag in done.stdout


def test_url_is_the_admin_address_flag_and_admin_url_a_deprecated_alias(capsys: pytest.CaptureFixture[str]) -> None:
    from herald.cli.main import build_parser
    from herald.cli.services import operator_settings

    args = build_parser().parse_args(["operator", "--url", "herald://lookup:6660"])
    assert operator_settings(args).admin_url == "herald://lookup:6660"
    assert "deprecated" not in capsys.readouterr().err
    args = build_parser().parse_args(["operator", "--admin-url", "herald://old:6660", "--metrics-port", "0",
                                      "--health-port", "-1", "--peering-name", "herald-operator"])
    settings = operator_settings(args)
    assert (settings.admin_url, settings.metrics_port, settings.health_port, settings.peering_name) == (
        "herald://old:6660", 0, -1, "herald-operator")
    assert "--admin-url is deprecated; use --url" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "value"), [("health_port", 0), ("health_port", 70000), ("metrics_port", -2)])
def test_probe_and_metrics_ports_are_checked(name: str, value: int) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        load_settings(overrides={name: value}, environ={})
