"""The chart runs `herald <command>` the way the CLI takes configuration: every flag it passes is one
the command's argparse parser knows and parses, every HERALD_* variable names a real setting, and
the settings those flags and variables make load (types convert, validation passes) — a wrong flag or
value would crash the pod at start. And values.schema.json's `settings` names are exactly the
settings the chart does not set itself (security settings included: the tls and auth values set them)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
from typing import Any

import pytest
from herald.broker.settings import BrokerSettings
from herald.cli.main import build_parser
from herald.common.config import load_settings
from herald.common.tracing import TracingSettings, load_tracing_settings
from herald.dlq.settings import DlqWorkerSettings
from herald.lookup.settings import LookupSettings
from herald.proxy.settings import ProxySettings
from herald.storage.node.settings import StorageSettings
from herald_operator.settings import OperatorSettings
from herald_operator.settings import load_settings as load_operator_settings

from tests.chart.render import (
    CHART,
    PRODUCTION_VALUES,
    SECURE_VALUES,
    Manifest,
    component_of,
    containers,
    render,
    workloads,
)
from tests.chart.test_security import OWN_SECRET_RENDER, PROTECTED_RENDER

SETTINGS: dict[str, type[Any]] = {
    "lookup": LookupSettings, "broker": BrokerSettings, "storage": StorageSettings, "proxy": ProxySettings,
    "dlq-worker": DlqWorkerSettings, "operator": OperatorSettings,
}
# values.yaml keys of each section's `settings` map.
VALUES_KEYS = {"lookup": "lookup", "broker": "broker", "storage": "storage", "proxy": "proxy",
               "dlq-worker": "dlqWorker", "operator": "operator"}
# Values the downward API and Secrets would give the pod.
FIELD_REFS = {"metadata.name": "herald-broker-5d8f7c9b4-x2x7q", "status.podIP": "10.42.0.17"}
SECRET_VALUE = "redis://:secret@redis.example.internal:6379/0"
# A render that sets one setting of every section through `settings`, and the flags values turn off.
SETTINGS_RENDER = (
    "lookup.settings.expiry_heartbeats=4", "broker.settings.max_message_size=1048576",
    "broker.settings.deduplication_enabled=false", "broker.metricsTopicLevel=false",
    "storage.settings.checkpoint_interval=5", "proxy.settings.operation_timeout=12.5",
    "dlqWorker.settings.initial_subscription=replay", "operator.settings.resync_interval=60",
    "operator.watchNamespaces={apps,payments}",
    "operator.peering=true", "redis.enabled=false", "redis.external.existingSecret=redis-url",
    "tracing.exporter=otlp", "tracing.otlpEndpoint=http://otel-collector:4317",
)


# Settings a service has (SecuritySettings is every server's) that it does not use, or that the chart
# deliberately leaves unset (docs/security.md "What the Helm chart needs"): neither set nor offered.
UNUSED = {
    "lookup": {"auth_token_file": "lookup calls no other service"},
    "storage": {"auth_token_file": "storage nodes call no other service",
                "proxy_roles": "no proxy calls storage nodes", "dlq_worker_roles": "storage does not read it"},
    "proxy": {name: "the proxy authenticates; lookup and the brokers authorize" for name in (
        "authorization_enabled", "superuser_roles", "broker_roles", "proxy_roles", "dlq_worker_roles")},
}


def _secure_renders() -> list[list[Manifest]]:
    """TLS from cert-manager with HS256 and authorization; a TLS Secret with RS256 and an audience;
    the first with mutual TLS and protected metrics (all with empty `settings` maps, so that every
    variable they set is the chart's)."""
    return [render(SECURE_VALUES), render(sets=OWN_SECRET_RENDER), render(SECURE_VALUES, sets=PROTECTED_RENDER)]


@pytest.fixture(scope="module", params=["default", "production", "settings", "secure", "own-secret", "protected"])
def rendered(request: pytest.FixtureRequest) -> list[Manifest]:
    if request.param == "default":
        return render()
    if request.param == "production":
        return render(PRODUCTION_VALUES)
    if request.param == "secure":
        return render(PRODUCTION_VALUES, SECURE_VALUES)
    if request.param == "own-secret":
        return render(sets=OWN_SECRET_RENDER)
    if request.param == "protected":
        return render(PRODUCTION_VALUES, SECURE_VALUES, sets=PROTECTED_RENDER)
    return render(sets=SETTINGS_RENDER)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("herald's parser has no subcommands")


def _env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif "fieldRef" in entry["valueFrom"]:
            env[entry["name"]] = FIELD_REFS[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            assert "secretKeyRef" in entry["valueFrom"], entry
            env[entry["name"]] = SECRET_VALUE
    return env


def _expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in args (an unknown variable stays as written, as there)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def _herald_containers(manifests: list[Manifest]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for workload in workloads(manifests):
        for container in containers(workload):
            if component_of(workload) not in ("redis", "etcd"):
                found.append((workload["metadata"]["name"], container))
    return found


def _allowed_env(section: str) -> set[str]:
    prefix = f"HERALD_{section.upper().replace('-', '_')}_"
    names = {prefix + f.name.upper() for f in dataclasses.fields(SETTINGS[section])}
    names |= {"HERALD_TRACING_" + f.name.upper() for f in dataclasses.fields(TracingSettings)}
    return names | {"HERALD_LOG_LEVEL", "HERALD_LOG_FORMAT"}


def _overrides(section: str, args: argparse.Namespace) -> dict[str, Any]:
    """The flags as the CLI hands them to the settings loader (None: not given)."""
    fields = {f.name for f in dataclasses.fields(SETTINGS[section])}
    values = {name: value for name, value in vars(args).items() if name in fields and value is not None}
    if section == "operator" and args.namespace:
        values["namespaces"] = args.namespace
    return values


def test_every_flag_is_one_the_command_accepts(rendered: list[Manifest]) -> None:
    commands = _subparsers()
    for name, container in _herald_containers(rendered):
        command, *flags = container["args"]
        assert command in commands, f"{name}: `herald {command}` is not a command ({sorted(commands)})"
        known = {option for action in commands[command]._actions for option in action.option_strings}
        for flag in flags:
            option = flag.split("=", 1)[0]
            assert option in known, f"{name}: `herald {command}` has no option {option} (it has {sorted(known)})"


def test_every_variable_names_a_real_setting(rendered: list[Manifest]) -> None:
    for name, container in _herald_containers(rendered):
        section = container["args"][0]
        unknown = {var for var in _env(container) if var.startswith("HERALD_")} - _allowed_env(section)
        # load_settings ignores unknown variables: a misspelt one would be silently without effect.
        assert not unknown, f"{name}: {sorted(unknown)} are not settings of herald {section}"


def test_the_settings_each_pod_gets_load(rendered: list[Manifest]) -> None:
    """What the process would do first: parse its argv, then build its settings from env and flags."""
    for name, container in _herald_containers(rendered):
        env = _env(container)
        argv = [_expand(arg, env) for arg in container["args"]]
        assert not [a for a in argv if "$(" in a], f"{name}: unresolved variables in {argv}"
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exit_:
            pytest.fail(f"{name}: herald {' '.join(argv)} is refused by the CLI (exit {exit_.code})")
        section = argv[0]
        if section == "operator":
            settings: Any = load_operator_settings(None, _overrides(section, args), environ=env)
        else:
            settings = load_settings(SETTINGS[section], section, environ=env, overrides=_overrides(section, args))
        load_tracing_settings(environ=env)
        assert env["HERALD_LOG_FORMAT"] in ("text", "json")
        assert isinstance(logging.getLevelName(env["HERALD_LOG_LEVEL"]), int)
        if section in ("lookup", "broker"):
            assert settings.metadata_url.startswith(("redis://", "etcd://")), name
        if section == "broker":
            assert settings.advertised_address == f"{FIELD_REFS['status.podIP']}:{settings.port}"
            assert settings.broker_id == FIELD_REFS["metadata.name"]
            assert settings.lookup_address.endswith(":6660") and settings.storage_nodes
        if section in ("proxy", "broker", "lookup", "storage"):
            assert settings.host == "0.0.0.0", f"{name} must listen on the pod's address"


def test_settings_given_through_values_reach_the_settings_object() -> None:
    manifests = render(sets=SETTINGS_RENDER)
    by_section = {c["args"][0]: c for _, c in _herald_containers(manifests)}
    broker_env = _env(by_section["broker"])
    broker = load_settings(BrokerSettings, "broker", environ=broker_env)
    assert broker.max_message_size == 1048576 and broker.deduplication_enabled is False
    assert broker.metadata_url == SECRET_VALUE
    operator_args = build_parser().parse_args(by_section["operator"]["args"])
    operator = load_operator_settings(None, _overrides("operator", operator_args), environ=_env(by_section["operator"]))
    assert operator.namespaces == ["apps", "payments"] and operator.resync_interval == 60.0
    assert load_tracing_settings(environ=broker_env).otlp_endpoint == "http://otel-collector:4317"


def _managed_by_the_chart(section: str, manifests: list[Manifest], with_env: bool) -> set[str]:
    """Settings the chart itself sets for a section: by a flag, and (with_env: on a render whose
    `settings` maps are empty) by a variable."""
    fields = {f.name for f in dataclasses.fields(SETTINGS[section])}
    prefix = f"HERALD_{section.upper().replace('-', '_')}_"
    managed: set[str] = set()
    for _, container in _herald_containers(manifests):
        if container["args"][0] != section:
            continue
        args = build_parser().parse_args([_expand(a, _env(container)) for a in container["args"]])
        managed |= set(_overrides(section, args))
        if with_env:
            managed |= {var[len(prefix):].lower() for var in _env(container) if var.startswith(prefix)}
    return managed & fields


def test_the_schema_offers_exactly_the_settings_the_chart_leaves_open() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    plain, flags_on, secure = render(), render(sets=SETTINGS_RENDER), _secure_renders()
    for section, cls in SETTINGS.items():
        offered = set(schema["properties"][VALUES_KEYS[section]]["properties"]["settings"]["propertyNames"]["enum"])
        fields = {f.name for f in dataclasses.fields(cls)}
        managed = _managed_by_the_chart(section, plain, True) | _managed_by_the_chart(section, flags_on, False)
        for manifests in secure:
            managed |= _managed_by_the_chart(section, manifests, True)
        unused = set(UNUSED.get(section, {}))
        assert offered <= fields, f"{section}: schema offers {sorted(offered - fields)}, not settings of {cls.__name__}"
        assert not offered & managed, f"{section}: {sorted(offered & managed)} are set by the chart itself"
        assert unused <= fields and not unused & (offered | managed), f"{section}: UNUSED is out of date"
        missing = fields - managed - offered - unused
        assert not missing, (f"{section}: settings {sorted(missing)} of {cls.__name__} cannot be set through the "
                             f"chart: add them to {VALUES_KEYS[section]}.settings in values.schema.json")
