"""Types and helpers shared by every service and the client: names, message ids, the entry codec,
checksums, errors, configuration, gRPC plumbing.

This layer knows nothing of the services, the client or the metadata store.
"""
