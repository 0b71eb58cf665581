"""herald perf's messages and checks: sized payloads, payload files, keys, and the limits on each."""

from __future__ import annotations

from pathlib import Path

import pytest
from herald.common.errors import InvalidArgumentError
from herald.perf import payloads
from herald.perf.options import ConsumeOptions, PerfOptions, ProduceOptions
from herald.perf.payloads import Keys, file_payloads, sized_payload


def test_a_sized_payload_is_that_many_capital_letters() -> None:
    payload = sized_payload(1000)
    assert len(payload) == 1000 and set(payload) <= set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert len(set(payload)) > 20  # random letters, not one letter repeated (compressible like text, not zeros)
    assert sized_payload(0) == b""


def test_a_size_over_the_limit_is_refused_with_the_limit() -> None:
    with pytest.raises(InvalidArgumentError, match=f"--size must be between 0 and {payloads.MAX_SIZE} bytes"):
        sized_payload(payloads.MAX_SIZE + 1)


def test_a_payload_file_is_split_at_the_delimiter_or_sent_whole(tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_bytes(b"one\ntwo\n\nthree\n")
    assert file_payloads(str(path), "\n") == [b"one", b"two", b"three"]
    assert file_payloads(str(path), "") == [b"one\ntwo\n\nthree\n"]
    assert file_payloads(str(path), "two") == [b"one\n", b"\n\nthree\n"]


def test_an_empty_or_missing_payload_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"\n\n")
    with pytest.raises(InvalidArgumentError, match="holds no message"):
        file_payloads(str(empty), "\n")
    with pytest.raises(InvalidArgumentError, match="cannot be read"):
        file_payloads(str(tmp_path / "missing"), "\n")


def test_a_payload_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big"
    with path.open("wb") as handle:
        handle.truncate(payloads.MAX_PAYLOAD_FILE + 1)  # sparse: the size is what is checked
    with pytest.raises(InvalidArgumentError, match=f"is {payloads.MAX_PAYLOAD_FILE + 1} bytes; at most"):
        file_payloads(str(path), "\n")


def test_keys_go_round_robin_or_at_random_among_n() -> None:
    keys = Keys(3, "round-robin")
    assert [keys.next() for _ in range(7)] == ["key-0", "key-1", "key-2", "key-0", "key-1", "key-2", "key-0"]
    randomly = Keys(3, "random")
    drawn = {randomly.next() for _ in range(200)}
    assert drawn <= {"key-0", "key-1", "key-2"}
    assert Keys(0, "round-robin").next() is None
    with pytest.raises(InvalidArgumentError, match="--keys must be between 0 and"):
        Keys(payloads.MAX_KEYS + 1, "round-robin")


@pytest.mark.parametrize(("options", "message"), [
    (PerfOptions(topics=()), "give at least one topic"),
    (PerfOptions(topics=("t",), protocol="amqp"), "--protocol must be one of herald, pulsar"),
    (PerfOptions(topics=("t",), protocol="pulsar", security={"auth": object()}),
     "--protocol pulsar does not take Herald's TLS or token flags"),
    (PerfOptions(topics=("t",), produce=ProduceOptions(partitions=-1)), "--partitions must be 0"),
    (PerfOptions(topics=("t",), produce=ProduceOptions(batch_max_delay_ms=0)), "--batch-max-delay-ms must be positive"),
    (PerfOptions(topics=("t",), consume=ConsumeOptions(subscription="")), "--subscription must not be empty"),
    (PerfOptions(topics=("t",), consume=ConsumeOptions(receiver_queue_size=0)),
     "--receiver-queue-size must be at least 1"),
])
def test_bad_option_combinations_are_usage_errors_naming_the_flag(options: PerfOptions, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        options.check()
