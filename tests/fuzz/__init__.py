"""Fuzzing against real processes (users' guide: docs/security.md, "What the fuzzers prove").

`test_rpc_fuzz` drives every client-facing and admin RPC with requests built from the protobuf
descriptors (`strategies`), as built or damaged, and `test_raw_bytes` puts raw bytes on the ports,
all against one standalone (`target`). After each property the target is checked: it serves, it
logged no traceback, and it lost nothing of a checking producer and consumer.

A second target (`tenants`: TLS, tokens, authorization) holds an attacker tenant, `alice`, and a
victim, `bob`, with namespaces, policies, grants, topics, subscriptions, dead-letter policies,
cursors and checking traffic of its own. `hostile` makes hostile entries (metadata at its
extremes, compression bombs and corrupt data for each codec, record framing that lies) and admin
requests with every combination of alice's, bob's, malformed and empty names in their resource
fields. `test_hostile_fuzz` sends the entries on raw Produce streams as alice's producer (each gets
a receipt or a clear error, and the stream goes on) to a Herald consumer in its own process
(`consumer_process`; Shared and Key_Shared: it never raises, stays under a peak RSS bound and
receives a marker after each entry). It sends the requests as alice's tenant admin: they are
refused whenever they name bob's resources, and bob's state, read by the super-user, is byte for
byte the same afterwards. Both standalones run with max_partitions_per_topic 16 (`FUZZ_ENV`), so
random partition counts stay quick to fan out.
"""
