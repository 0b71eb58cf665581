"""Channels from the proxy to brokers (and to lookup): `connections_per_broker` channels per
address, used in turn, shared by every client stream and call relayed there. A channel that
failed is replaced by a fresh one (a gRPC channel in TRANSIENT_FAILURE waits out its own backoff
before it dials again, which would delay reaching a broker restarted on the same address); the
replaced one is closed once its calls had time to finish."""

from __future__ import annotations

import asyncio
import itertools

import grpc
import grpc.aio

from herald.common.transport.rpc import MAX_GRPC_MESSAGE_BYTES
from herald.common.transport.tls import PLAINTEXT, Dialer

_BAD_STATES = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)


def _channel_options(keepalive_seconds: float) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", int(keepalive_seconds * 1000)),
        ("grpc.keepalive_timeout_ms", int(keepalive_seconds * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.enable_retries", 0),
        # Each pooled channel is its own TCP connection, not a subchannel shared with the others.
        ("grpc.use_local_subchannel_pool", 1),
    ]


class BrokerPool:
    """Channels by address; `get` never waits (a call on a channel that cannot connect fails with
    UNAVAILABLE, which the caller treats as the broker being unreachable)."""

    def __init__(self, connections_per_broker: int, keepalive_seconds: float, close_grace: float,
                 dialer: Dialer = PLAINTEXT) -> None:
        self._dialer = dialer
        self._per_address = connections_per_broker
        self._options = _channel_options(keepalive_seconds)
        self._close_grace = close_grace
        self._channels: dict[tuple[str, int], grpc.aio.Channel] = {}
        self._turn = itertools.count()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def get(self, address: str) -> grpc.aio.Channel:
        if self._closed:
            raise RuntimeError("broker pool closed")
        key = (address, next(self._turn) % self._per_address)
        channel = self._channels.get(key)
        if channel is not None and channel.get_state() in _BAD_STATES:
            self._retire(key, channel)
            channel = None
        if channel is None:
            channel = self._channels[key] = self._dialer.channel(address, self._options)
        return channel

    def discard(self, address: str) -> None:
        """The broker at `address` failed a call: the next `get` dials it afresh."""
        for key, channel in list(self._channels.items()):
            if key[0] == address:
                self._retire(key, channel)

    def _retire(self, key: tuple[str, int], channel: grpc.aio.Channel) -> None:
        del self._channels[key]
        task = asyncio.get_running_loop().create_task(channel.close(self._close_grace))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every channel; calls still in progress are cancelled."""
        self._closed = True
        channels, self._channels = list(self._channels.values()), {}
        await asyncio.gather(*(channel.close(None) for channel in channels), return_exceptions=True)
        for task in list(self._closing):
            task.cancel()
        await asyncio.gather(*self._closing, return_exceptions=True)
