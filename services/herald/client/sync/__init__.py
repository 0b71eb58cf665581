"""The blocking API: Client, Producer, Consumer and Reader over the asyncio core, which runs on one
background event-loop thread owned by the Client. Calls that need an answer cross to the loop and
wait; calls that do not (send_async, acknowledge) are queued onto it without waiting."""

from herald.client.sync.client import Client
from herald.client.sync.consumer import Consumer
from herald.client.sync.producer import Producer
from herald.client.sync.reader import Reader

__all__ = ["Client", "Consumer", "Producer", "Reader"]
