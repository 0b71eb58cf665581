"""`herald perf`'s flags as argparse reads them: Herald's long names, pulsar-perf's short forms,
and the subscription type's spellings."""

from __future__ import annotations

import pytest
from herald.cli.main import build_parser


def test_pulsar_perfs_short_flags_set_the_same_settings_as_the_long_ones() -> None:
    args = build_parser().parse_args(
        ["perf", "produce", "a", "b", "-r", "100", "-m", "5", "-n", "2", "-s", "10", "-o", "50", "-z", "lz4",
         "-i", "3", "-time", "4", "-bm", "20", "-f", "payloads.txt"])
    assert args.topics == ["a", "b"]
    assert (args.rate, args.count, args.producers_per_topic, args.size, args.max_pending, args.compression,
            args.report_interval, args.duration, args.batch_max_messages, args.payload_file) == (
        100.0, 5, 2, 10, 50, "lz4", 3.0, 4.0, 20, "payloads.txt")
    args = build_parser().parse_args(
        ["perf", "consume", "a", "-ss", "s", "-st", "Shared", "-n", "3", "-q", "7", "--initial-position", "Earliest"])
    assert (args.subscription, args.subscription_type, args.consumers_per_topic, args.receiver_queue_size,
            args.initial_position) == ("s", "Shared", 3, 7, "earliest")


def test_end_to_end_gives_n_to_the_producers_and_takes_one_topic() -> None:
    args = build_parser().parse_args(["perf", "end-to-end", "t", "-n", "2", "--consumers-per-topic", "3"])
    assert (args.producers_per_topic, args.consumers_per_topic) == (2, 3)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["perf", "end-to-end", "t", "u"])
    assert exit_info.value.code == 2


def test_key_shared_is_read_as_pulsars_spelling_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["perf", "consume", "t", "--subscription-type", "KeyShared"])
    assert args.subscription_type == "Key_Shared"
    assert "KeyShared is deprecated" in capsys.readouterr().err
    assert build_parser().parse_args(["perf", "consume", "t", "-st", "Key_Shared"]).subscription_type == "Key_Shared"


def test_the_documented_defaults() -> None:
    args = build_parser().parse_args(["perf", "produce", "t"])
    assert (args.size, args.rate, args.max_pending, args.batching, args.batch_max_messages, args.batch_max_delay_ms,
            args.compression, args.count, args.duration, args.report_interval, args.protocol) == (
        1024, 0.0, 1000, "on", 1000, 1.0, "none", 0, 0.0, 10.0, "herald")
