"""Contexts without a server: the file format (TOML, mode 600, errors naming the file and line), and the
one precedence rule of every client option: flag > HERALD_* variable > context > built-in default."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.cli import client_options
from herald.cli.client_options import CLIENT_OPTIONS, ENVIRONMENT, resolve_client_options
from herald.cli.context_store import Context, ContextFileError, ContextNotFoundError, ContextStore, config_dir
from herald.common.errors import InvalidArgumentError

FULL = Context(name="full", url="herald+ssl://ctx:6651", auth_token_file="/ctx/token",
               tls_trust_certs_file="/ctx/ca.pem", tls_cert_file="/ctx/cert.pem", tls_key_file="/ctx/key.pem",
               description='quotes " and \\ and ünïcode')


@pytest.fixture(autouse=True)
def no_context_flag() -> Iterator[None]:
    yield
    client_options.choose_context(None)


@pytest.fixture
def store(tmp_path: Path) -> ContextStore:
    return ContextStore(tmp_path / "config")


def test_a_context_round_trips_through_its_file_written_mode_600(store: ContextStore) -> None:
    path = store.save(FULL)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.context_dir.stat().st_mode) == 0o700
    path.chmod(0o644)  # made readable by all since: replacing the context must not keep that
    assert store.save(FULL) == path and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.load("full") == FULL
    assert store.names() == ["full"] and not list(store.context_dir.glob(".*"))


def test_config_dir_is_herald_config_dir_else_xdg_else_home(tmp_path: Path) -> None:
    assert config_dir({"HERALD_CONFIG_DIR": "/a", "XDG_CONFIG_HOME": "/b"}) == Path("/a")
    assert config_dir({"XDG_CONFIG_HOME": "/b"}) == Path("/b/herald")
    assert config_dir({}) == Path.home() / ".config" / "herald"


@pytest.mark.parametrize(("text", "message"), [
    ('url = "u"\n[url2]\nx = "y"\n', "line 2: unknown key 'url2'"),
    ('url = "u"\n\n  "tls_cert_file" = 3\n', "line 3: tls_cert_file must be a string, got int"),
    ('url = "u"\nurl = "v"\n', "line 2: not valid TOML"),
    ('url = "u\n', "line 1: not valid TOML"),
])
def test_a_malformed_file_is_refused_naming_the_file_and_line(store: ContextStore, text: str, message: str) -> None:
    store.context_dir.mkdir(parents=True)
    store.path("bad").write_text(text)
    with pytest.raises(ContextFileError) as raised:
        store.load("bad")
    assert str(raised.value).startswith(f"context file {store.path('bad')}, {message}"), raised.value


@pytest.mark.parametrize("name", ["", ".hidden", "-flag", "a/b", "../up", "a b", "x" * 65])
def test_a_name_that_is_not_a_plain_file_name_is_refused(store: ContextStore, name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"context name .* is invalid"):
        store.save(Context(name=name, url="herald://h:1"))


def test_selecting_or_removing_an_unknown_context_names_the_known_ones(store: ContextStore) -> None:
    store.save(Context(name="one", url="herald://h:1"))
    for act in (store.select, store.remove, store.load):
        with pytest.raises(ContextNotFoundError, match=r"known contexts: one$"):
            act("two")
    store.select("one")
    assert store.selected() == "one"
    store.remove("one")
    assert store.selected() is None and store.names() == []


def _environ(store: ContextStore, **variables: str) -> dict[str, str]:
    return {"HERALD_CONFIG_DIR": str(store.directory), **variables}


@pytest.mark.parametrize("option", CLIENT_OPTIONS)
def test_each_option_is_the_flag_else_the_variable_else_the_context_else_the_default(
        store: ContextStore, option: str) -> None:
    store.save(FULL)
    store.select("full")
    from_context = getattr(FULL, option)
    variable = {ENVIRONMENT[option]: f"/env/{option}"}
    assert resolve_client_options({option: f"/flag/{option}"}, _environ(store, **variable))[option] == f"/flag/{option}"
    assert resolve_client_options({}, _environ(store, **variable))[option] == f"/env/{option}"
    assert resolve_client_options({option: None}, _environ(store))[option] == from_context
    store.remove("full")
    default = "herald://127.0.0.1:6660" if option == "url" else None
    assert resolve_client_options({}, _environ(store))[option] == default


def test_the_context_is_the_flag_else_herald_context_else_the_selected_one(store: ContextStore) -> None:
    for name in ("selected", "variable", "flag"):
        store.save(Context(name=name, url=f"herald://{name}:1"))
    store.select("selected")
    assert resolve_client_options({}, _environ(store))["url"] == "herald://selected:1"
    assert resolve_client_options({}, _environ(store, HERALD_CONTEXT="variable"))["url"] == "herald://variable:1"
    client_options.choose_context("flag")
    assert resolve_client_options({}, _environ(store, HERALD_CONTEXT="variable"))["url"] == "herald://flag:1"


def test_a_named_context_must_exist_even_when_flags_give_everything(store: ContextStore) -> None:
    everything = {name: f"/flag/{name}" for name in CLIENT_OPTIONS}
    with pytest.raises(ContextNotFoundError, match="context 'gone' does not exist"):
        resolve_client_options(everything, _environ(store, HERALD_CONTEXT="gone"))
    store.context_dir.mkdir(parents=True)
    store.selection_file.write_text("gone\n")  # a stale selection is read only when an option is left open
    assert resolve_client_options(everything, _environ(store)) == everything
    with pytest.raises(ContextNotFoundError):
        resolve_client_options({}, _environ(store))
