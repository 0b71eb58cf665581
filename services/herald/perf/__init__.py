"""`herald perf`: the load generator and latency meter Pulsar and Kafka users know (pulsar-perf,
kafka-producer-perf-test): produce, consume, or both ends in one process, and report rates and
HDR-histogram latencies every interval and for the whole run.

The measuring core is pure and needs no network: `pacer` (a fixed rate without drift), `recorder`
(per-interval and cumulative histograms, warm-up), `report` (the text and JSON lines). `payloads`
makes the messages. The drivers are thin: `herald_driver` over the asyncio client, `pulsar_driver`
over the official pulsar-client (blocking calls on threads, never on the event loop); `runner` owns
what every run shares (the reporting task, the stop conditions, Ctrl-C). This package sits on the
client like the CLI does; only herald.cli imports it, and it knows nothing of the services.
"""
