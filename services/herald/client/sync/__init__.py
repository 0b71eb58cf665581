"""The blocking API: Client, Producer and Consumer over the asyncio core, which runs on one
background event-loop thread owned by the Client. Calls that need an answer cross to the loop and
wait; calls that do not (send_async, acknowledge) are queued onto it without waiting."""

from herald.client.sync.client import Client
from herald.client.sync.consumer import Consumer
from herald.client.sync.producer import Producer

__all__ = ["Client", "Consumer", "Producer"]
