"""Where contexts live and how they are written: one TOML file per context in <config>/context/, the
selected one's name in <config>/context.txt (the layout of `nats context`), <config> being
$HERALD_CONFIG_DIR, else $XDG_CONFIG_HOME/herald, else ~/.config/herald. A context may name
credentials, so its file is written with mode 600 in a directory of mode 700."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from herald.common.errors import ErrorCode, HeraldError, InvalidArgumentError, NotFoundError

# A name is a file name: no separators, no leading dot (no ../, no hidden files).
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


class ContextNotFoundError(NotFoundError):
    """A context name that has no file (exit status 1)."""


class ContextFileError(HeraldError):
    """A context file that cannot be read as a context (exit status 1: the file, not the command line,
    is wrong)."""

    code = ErrorCode.INVALID_ARGUMENT


@dataclass(frozen=True)
class Context:
    """The client options one context gives (None: not set by this context)."""

    name: str
    url: str | None = None
    auth_token_file: str | None = None
    tls_trust_certs_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    description: str | None = None

    def options(self) -> dict[str, str | None]:
        return {field.name: getattr(self, field.name) for field in fields(self) if field.name != "name"}


KEYS = tuple(field.name for field in fields(Context) if field.name != "name")


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("HERALD_CONFIG_DIR"):
        return Path(env["HERALD_CONFIG_DIR"])
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "herald"
    return Path.home() / ".config" / "herald"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidArgumentError(
            f"context name {name!r} is invalid: use letters, digits, '_', '.' and '-' (at most 64, "
            "not starting with '.' or '-')")
    return name


class ContextStore:
    """The contexts of one configuration directory."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else config_dir()
        self.context_dir = self.directory / "context"
        self.selection_file = self.directory / "context.txt"

    def path(self, name: str) -> Path:
        return self.context_dir / f"{check_name(name)}.toml"

    def names(self) -> list[str]:
        if not self.context_dir.is_dir():
            return []
        return sorted(path.stem for path in self.context_dir.glob("*.toml") if _NAME.match(path.stem))

    def selected(self) -> str | None:
        """The name in context.txt (`herald context select`), or None."""
        try:
            name = self.selection_file.read_text().strip()
        except FileNotFoundError:
            return None
        return name or None

    def load(self, name: str) -> Context:
        path = self.path(name)
        try:
            text = path.read_text()
        except FileNotFoundError:
            known = ", ".join(self.names()) or "none (herald context add NAME --url URL)"
            raise ContextNotFoundError(
                f"context {name!r} does not exist in {self.context_dir}; known contexts: {known}") from None
        try:
            table = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            # tomllib's message ends with "(at line N, column M)", or "(at end of document)".
            where = re.search(r"\(at line (\d+), column \d+\)", str(error))
            line = int(where.group(1)) if where else max(1, len(text.splitlines()))
            reason = re.sub(r"\s*\(at [^)]*\)$", "", str(error))
            raise ContextFileError(f"context file {path}, line {line}: not valid TOML ({reason}); "
                                   "fix or remove the file") from None
        values: dict[str, str] = {}
        for key, value in table.items():
            line = _line_of(text, key)
            if key not in KEYS:
                raise ContextFileError(f"context file {path}, line {line}: unknown key {key!r}; "
                                       f"a context sets {', '.join(KEYS)}")
            if not isinstance(value, str):
                raise ContextFileError(f"context file {path}, line {line}: {key} must be a string, "
                                       f"got {type(value).__name__}")
            values[key] = value
        return Context(name=name, **values)

    def save(self, context: Context) -> Path:
        """Write (or replace) the context's file, mode 600, atomically."""
        path = self.path(context.name)
        self.context_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        lines = [f"{key} = {json.dumps(value)}\n" for key, value in context.options().items() if value is not None]
        temporary = path.with_name(f".{path.name}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)  # a leftover temporary file may have had another mode
            handle.write("".join(lines))
        os.replace(temporary, path)
        return path

    def select(self, name: str) -> None:
        self.load(name)  # refuses an unknown or unreadable context before it is selected
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.selection_file.write_text(f"{name}\n")

    def remove(self, name: str) -> None:
        path = self.path(name)
        if not path.exists():
            self.load(name)  # raises ContextNotFoundError with the known names
        path.unlink()
        if self.selected() == name:
            self.selection_file.unlink(missing_ok=True)


def _line_of(text: str, key: str) -> int:
    """The line a top-level key is set on (1-based), for error messages; 1 if not found."""
    pattern = re.compile(rf"^\s*\[*\s*[\"']?{re.escape(key)}[\"']?\s*[=\].]")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return 1
