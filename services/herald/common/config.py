"""Settings loading, the same for every service: dataclass defaults < config file (TOML, a table
per service) < environment (HERALD_<SERVICE>_<FIELD>) < command-line flags."""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from herald.common.errors import InvalidArgumentError

T = TypeVar("T")
_SECRET_WORDS = ("password", "secret", "token", "key")


def _convert(raw: Any, kind: Any, name: str) -> Any:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        options = [k for k in typing.get_args(kind) if k is not type(None)]
        if raw in (None, "", "none", "None"):
            return None
        kind = options[0]
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"{raw!r} is not a boolean")
        if kind in (int, float, str):
            return kind(raw)
        if typing.get_origin(kind) is list:
            items = raw if isinstance(raw, list) else [p.strip() for p in str(raw).split(",") if p.strip()]
            (item_kind,) = typing.get_args(kind)
            return [_convert(item, item_kind, name) for item in items]
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"setting {name}={raw!r} is invalid: {exc}") from exc
    return raw


def load_settings(
    cls: type[T],
    section: str,
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> T:
    """Build `cls` (a dataclass) from its defaults, then the file's [section], then
    HERALD_<SECTION>_<FIELD> variables, then overrides (flags; None values are ignored)."""
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    if config_file is not None:
        with open(config_file, "rb") as handle:
            table = tomllib.load(handle).get(section, {})
        unknown = set(table) - fields
        if unknown:
            raise InvalidArgumentError(f"unknown settings in [{section}] of {config_file}: {sorted(unknown)}")
        values.update(table)
    prefix = f"HERALD_{section.upper().replace('-', '_')}_"
    for name in fields:
        if prefix + name.upper() in environ:
            values[name] = environ[prefix + name.upper()]
    for name, value in (overrides or {}).items():
        if value is not None:
            if name not in fields:
                raise InvalidArgumentError(f"unknown setting {name!r} for {section}")
            values[name] = value
    converted = {name: _convert(value, hints[name], name) for name, value in values.items()}
    return cls(**converted)


def describe(settings: Any) -> str:
    """One line per setting for start-up logs, with secrets masked."""
    lines = []
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if value and any(word in field.name for word in _SECRET_WORDS):
            value = "****"
        lines.append(f"  {field.name} = {value}")
    return "\n".join(lines)


def check_metrics_port(port: int) -> None:
    """A service's metrics_port setting: a port, 0 (any free port) or -1 (no metrics endpoint)."""
    if port < -1:
        raise InvalidArgumentError(
            f"metrics_port must be a port, 0 (any free port) or -1 (no metrics endpoint), got {port}")


def check_server_limits(settings: Any) -> None:
    """The limits every gRPC server's settings share, where it has them: grpc_max_receive_message_bytes
    (positive), max_streams_per_connection (positive), max_connections_per_address (0: no limit),
    connection_idle_timeout (seconds)."""
    size = getattr(settings, "grpc_max_receive_message_bytes", 1)
    if size < 1:
        raise InvalidArgumentError(f"grpc_max_receive_message_bytes must be a positive number of bytes, got {size}")
    streams = getattr(settings, "max_streams_per_connection", 1)
    if streams < 1:
        raise InvalidArgumentError(f"max_streams_per_connection must be a positive number, got {streams}")
    per_address = getattr(settings, "max_connections_per_address", 0)
    if per_address < 0:
        raise InvalidArgumentError(
            f"max_connections_per_address must be 0 (no limit) or a positive number, got {per_address}")
    idle = getattr(settings, "connection_idle_timeout", 1.0)
    if not idle > 0:
        raise InvalidArgumentError(f"connection_idle_timeout must be a positive number of seconds, got {idle!r}")
