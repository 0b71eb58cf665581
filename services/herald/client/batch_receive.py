"""What one batch_receive() takes (Pulsar's MessagesImpl.canAdd): queued messages in order, up to
the policy's max_num_messages and max_num_bytes (-1: no limit; bytes are the values' sizes), the
first message always fitting; and whether a queue already holds enough to reach a limit, in which
case batch_receive returns at once instead of waiting for its timeout."""

from __future__ import annotations

from collections import deque
from typing import Any

from herald.client.config import BatchReceivePolicy
from herald.client.message import Message


def reaches_limit(queue: deque[Message[Any]], policy: BatchReceivePolicy) -> bool:
    """Whether `queue` holds enough messages or bytes to fill a batch."""
    if not queue:
        return False
    if 0 < policy.max_num_messages <= len(queue):
        return True
    if policy.max_num_bytes > 0:
        size = 0
        for message in queue:
            size += len(message.data())
            if size >= policy.max_num_bytes:
                return True
    return False


def take(queue: deque[Message[Any]], policy: BatchReceivePolicy) -> list[Message[Any]]:
    """Remove and return one batch's messages from the head of `queue`."""
    max_messages, max_bytes = policy.max_num_messages, policy.max_num_bytes
    taken: list[Message[Any]] = []
    size = 0
    while queue:
        length = len(queue[0].data())
        if taken and (0 < max_messages <= len(taken) or 0 < max_bytes < size + length):
            break
        taken.append(queue.popleft())
        size += length
    return taken
