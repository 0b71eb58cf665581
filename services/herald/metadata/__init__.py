"""The metadata store: one async interface (store.MetadataStore) over three backends, etcd for
production clusters, Redis for development clusters and an embedded SQLite file for standalone
(backends.open_store picks one by URL: etcd://h1:p1,h2:p2,..., redis://, sqlite:///path).

This layer knows nothing of the services that keep their metadata in it.

The interface: get, put with a version compare-and-set (`expected_version`: None, 0 = must not
exist, n), delete, list by prefix, leases (grant / keepalive / revoke; a key put with a lease is
ephemeral and dies with it), watch a prefix, allocate_id (a counter by CAS).

- redis: every operation is one Lua script (compare-and-set, lease checks and the watch event
  together). Keys live at `herald:k:<key>` (a hash of value, version and lease), with a sorted set of
  all keys for prefix listing. Lease expiry is reckoned on the Redis server's clock, and every
  instance runs a reaper for expired leases. Change events go out on pub/sub, numbered, so that a
  new watch never sees an event from before it.
- etcd: a client generated from etcd's v3 gRPC API (herald.api.etcd). Keys live under a prefix
  (`/herald/` by default); etcd's per-key version is the version, CAS a Txn comparing it, ephemeral
  keys puts with an etcd lease, and watches follow etcd's revisions, resuming on any member from the
  last one seen. etcd_client.py: channels to every member, deadlines, failover, retry rules.
- embedded: SQLite in WAL mode with synchronous=FULL on one worker thread, with an exclusive lock
  (one process). The leases of a previous process are expired at open: their owners died with it.

Where Herald keeps what (the services' keys; tenants, namespaces and the rest are
resources.py's, which lookup and brokers both read):

    /brokers/<id>                          lookup: a broker's registration, ephemeral on its lease
    /ownership/<topic>                     lookup assigns (CAS), a broker takes over its own after a
                                           restart and deletes it on unload: the owner, ephemeral
                                           on the owner's lease (herald.common.ownership)
    /unloading/<topic>                     broker: the broker that just unloaded the topic, on its
                                           own lease (unload_exclusion_seconds, 10 s): lookup
                                           passes it over
    /counters/ledger-id                    storage client: ledger ids, allocated by CAS
    /ledgers/<id, 20 digits>               storage client: ensemble history, Qw, Qa, state OPEN /
                                           IN_RECOVERY / CLOSED, last entry, length
    /storage/nodes/<host:port>             storage node: its registration (free bytes, available /
                                           draining), ephemeral on its lease (storage.membership)
    /storage/draining/<host:port>          admin: the node's drain mark, persistent
    /storage/autorecovery/auditor          autorecovery: the elected auditor, ephemeral on its lease
    /managed-ledgers/<tenant>/<ns>/persistent/<name>   broker: the topic's ledger list
    /cursors/<managed ledger>/<subscription>           broker: mark-delete position and the
                                                       individually acked ranges
    /dedup/<managed ledger>                broker: dedup snapshot (position, highest sequence id
                                           per producer)
    /compaction/<managed ledger>           broker: the topic's compaction: its compacted ledger
                                           and horizon, the ledger a run is writing, the last
                                           run's status (broker.core.compaction.state)
    /counters/producer-name                broker: numbers for the producer names it gives
    /topic-epochs/<topic>                  broker: the topic epoch of exclusive producers (a
                                           partition's own; broker.core.access_modes)
    /schemas/<topic>                       broker: the topic's schema history (its versions' type,
                                           data, properties, timestamp, deleted), a partitioned
                                           topic's for all its partitions (broker.core.schemas)
    /non-persistent-topics/<tenant>/<ns>/<name>        broker: a non-persistent topic, from its
                                                       first load until it is deleted
    /partitioned-topics/<topic>            admin: {"partitions": n}
    /admin/tenants/<tenant>, /admin/policies/<tenant>/<ns>, /admin/topic-policies/<topic>,
    /admin/permissions/<tenant>/<ns>, /admin/topic-permissions/<topic>,
    /admin/dead-letter-policies/<topic>/<subscription>          admin: see resources.py

- resources: `Resources`, the admin's records (tenants, namespaces and their policies, topic
  overrides, partition counts, a subscription's dead-letter policy set by an admin), each change a
  CAS. `check_namespace` and `check_partition` are what lookup and brokers refuse a topic that
  cannot exist with; `list_topics` / `count_topics` count a namespace's topics (a partitioned topic
  as its partitions).
- policies: `Policies`, every field optional (None inherits); a topic's effective ones are its
  own over its namespace's over the broker's settings (`merged_over`). policies_proto converts
  them to and from the admin contract.
- authorization: `Permissions` (the grants under /admin/permissions/... and
  /admin/topic-permissions/..., changed by CAS) and `Authorizer` (super-users, tenants'
  admin_roles, grants; reads remembered for a second). Here because brokers and lookup both
  decide, and neither may import the other.
"""

from herald.metadata.backends import open_store
from herald.metadata.store import LeaseExpiredError, MetadataStore, Versioned, WatchEvent

__all__ = ["LeaseExpiredError", "MetadataStore", "Versioned", "WatchEvent", "open_store"]
