"""Default limits shared by several services' settings (plain numbers: settings modules import them
without pulling in any transport)."""

from __future__ import annotations

MIB = 1024 * 1024
# What the client-facing servers (broker, proxy) take per request by default: a 5 MiB message
# (max_message_size) with its entry header, SendEntry framing and room to spare. gRPC refuses a
# bigger request from its length prefix, before buffering it.
DATA_SERVER_MAX_RECEIVE_BYTES = 8 * MIB
# HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS of every server by default: streams (a producer, a
# consumer, a call in progress) one connection may hold at once; past it a client's new stream
# waits in the client for one to end. Herald's client puts every producer and consumer of a
# broker on one connection, so it is far above what an application opens.
DEFAULT_MAX_STREAMS_PER_CONNECTION = 4096
