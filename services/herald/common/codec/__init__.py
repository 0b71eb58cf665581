"""The bytes Herald stores and sends, with no I/O and no transport: the entry (one producer batch:
header, metadata, packed records), message ids and positions, topic names, checksums, compression,
properties. Must not know: gRPC, any service, the event loop."""
