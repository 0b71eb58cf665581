"""Every setting of every service is also a flag (issue 21, item 7): defaults < TOML < HERALD_* <
flags, with nothing reachable only through the environment (the broker's quorums were)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from herald.broker.settings import BrokerSettings
from herald.cli.main import build_parser
from herald.cli.service_flags import settings_overrides
from herald.common.config import load_settings
from herald.dlq.settings import DlqWorkerSettings
from herald.local_cluster import ClusterSettings, LocalCluster
from herald.lookup.settings import LookupSettings
from herald.proxy.settings import ProxySettings
from herald.storage.node.settings import StorageSettings

SERVICES: dict[str, type[Any]] = {
    "broker": BrokerSettings, "lookup": LookupSettings, "storage": StorageSettings, "proxy": ProxySettings,
    "dlq-worker": DlqWorkerSettings,
}


def _command(name: str) -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]  # type: ignore[no-any-return]
    raise AssertionError("no subcommands")


@pytest.mark.parametrize("command", sorted(SERVICES))
def test_every_setting_of_every_service_is_a_flag(command: str) -> None:
    parser = _command(command)
    dests = {action.dest for action in parser._actions if action.option_strings}
    missing = [f.name for f in dataclasses.fields(SERVICES[command]) if f.name not in dests]
    assert missing == [], f"`herald {command}` has no flag for these settings: {missing}"


@pytest.mark.parametrize("command", sorted(SERVICES))
def test_each_settings_flag_reaches_the_settings_overrides(command: str) -> None:
    """Given its default's value, every field's flag comes back as that field's override."""
    parser = _command(command)
    by_dest = {action.dest: action for action in parser._actions if action.option_strings}
    for field in dataclasses.fields(SERVICES[command]):
        action = by_dest[field.name]
        default = field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
        flag = action.option_strings[-1]
        if action.nargs == 0:  # a switch: --name (or --no-name) sets it
            argv = [command, next((s for s in action.option_strings if s.startswith("--no-") != bool(default)),
                                  flag)] if isinstance(action, argparse.BooleanOptionalAction) else [command, flag]
        else:
            argv = [command, flag, ",".join(default) if isinstance(default, list) else str(default) or "x"]
        args = build_parser().parse_args(argv)
        assert field.name in settings_overrides(args, SERVICES[command]), argv


def test_broker_quorums_are_flags() -> None:
    args = build_parser().parse_args(["broker", "--ensemble-size", "5", "--write-quorum", "4", "--ack-quorum", "3",
                                      "--no-deduplication-enabled", "--storage-nodes", "a:1,b:2"])
    settings = load_settings(BrokerSettings, "broker", environ={}, overrides=settings_overrides(args, BrokerSettings))
    assert (settings.ensemble_size, settings.write_quorum, settings.ack_quorum) == (5, 4, 3)
    assert settings.deduplication_enabled is False and settings.storage_nodes == ["a:1", "b:2"]


def test_local_cluster_passes_the_quorums_to_its_brokers_as_flags(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterSettings(base_dir=str(tmp_path), brokers=1, storage_nodes=2, ensemble_size=2,
                                           write_quorum=2, ack_quorum=1))
    args = cluster.brokers[0].args
    for flag, value in (("--ensemble-size", "2"), ("--write-quorum", "2"), ("--ack-quorum", "1")):
        assert args[args.index(flag) + 1] == value
    assert "HERALD_BROKER_ENSEMBLE_SIZE" not in cluster.brokers[0].env
