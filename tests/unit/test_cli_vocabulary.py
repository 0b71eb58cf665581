"""herald.cli.vocabulary: an old spelling (deprecated_alias) stores into the new option's destination,
converted as the new option converts, with a warning on stderr; subscription types take Pulsar's
spellings (any case) and the old KeyShared with a warning, and refuse anything else."""

from __future__ import annotations

import argparse

import pytest
from herald.cli.vocabulary import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    SUBSCRIPTION_TYPES,
    deprecated_alias,
    subscription_type,
)
from herald.client.config import ConsumerType


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    url = parser.add_argument("--url", default="herald://default:1", help="service URL")
    deprecated_alias(parser, "--service-url", url)
    count = parser.add_argument("-n", "--count", type=int, default=1, help="how many")
    deprecated_alias(parser, "--num-messages", count)
    kind = parser.add_argument("-t", "--type", type=subscription_type, default=ConsumerType.Exclusive, help="type")
    deprecated_alias(parser, "--subscription-type", kind)
    return parser


def test_an_alias_stores_into_the_new_destination_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["--service-url", "herald://old:2"])
    assert args.url == "herald://old:2"
    assert not hasattr(args, "service_url")
    assert capsys.readouterr().err == "herald: warning: --service-url is deprecated; use --url\n"


def test_an_alias_converts_its_value_as_the_new_option_does(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["--num-messages", "7", "--subscription-type", "key_shared"])
    assert args.count == 7 and isinstance(args.count, int)
    assert args.type is ConsumerType.KeyShared
    err = capsys.readouterr().err
    assert "--num-messages is deprecated; use --count" in err and "--subscription-type is deprecated; use --type" in err


def test_an_aliased_value_the_new_option_refuses_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--num-messages", "many"])
    assert exited.value.code == EXIT_USAGE
    assert "invalid int value: 'many'" in capsys.readouterr().err


def test_the_new_spelling_gives_no_warning_and_defaults_stay(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["--url", "herald://new:3", "-n", "2"])
    assert (args.url, args.count, args.type) == ("herald://new:3", 2, ConsumerType.Exclusive)
    assert capsys.readouterr().err == ""


def test_aliases_are_hidden_from_help() -> None:
    text = _parser().format_help()
    assert "--url" in text and "--service-url" not in text and "--num-messages" not in text


@pytest.mark.parametrize(("text", "kind"), [
    *[(name, kind) for name, kind in SUBSCRIPTION_TYPES.items()],
    *[(name.lower(), kind) for name, kind in SUBSCRIPTION_TYPES.items()],
    *[(name.upper(), kind) for name, kind in SUBSCRIPTION_TYPES.items()],
])
def test_subscription_type_accepts_pulsars_spellings_in_any_case(
        text: str, kind: ConsumerType, capsys: pytest.CaptureFixture[str]) -> None:
    assert subscription_type(text) is kind
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("text", ["KeyShared", "keyshared", "key-shared", "Key-Shared"])
def test_subscription_type_accepts_the_old_key_shared_spellings_with_a_warning(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert subscription_type(text) is ConsumerType.KeyShared
    assert capsys.readouterr().err == f"herald: warning: {text} is deprecated; use Key_Shared\n"


@pytest.mark.parametrize("text", ["", "Bogus", "Key Shared", "Exclusive2", "shared,failover"])
def test_subscription_type_refuses_anything_else_naming_the_types(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="use one of Exclusive, Shared, Failover, Key_Shared"):
        subscription_type(text)


def test_exit_statuses() -> None:
    assert (EXIT_OK, EXIT_FAILED, EXIT_USAGE) == (0, 1, 2)
