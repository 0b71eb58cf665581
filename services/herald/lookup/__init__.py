"""The lookup service (RocketMQ NameServer + Pulsar lookup): the broker registry with heartbeats and
expiry, topic ownership assignment, and partitioned-topic metadata.

It keeps its state in the metadata store, so replicas can run side by side; it knows nothing of
the broker's internals, of storage, or of the CLI.

The contract is proto/herald/v1/lookup.proto; `server.LookupServicer` is a thin servicer over:

- registry: brokers register (RegisterBroker grants a lease whose TTL is heartbeat_interval x
  expiry_heartbeats, 5 s x 3) and heartbeat, which renews it. A silent broker's lease expires, and
  with it its registration (/brokers/<id>) and every /ownership key it held, since they are
  ephemeral on the same lease. So the next LookupTopic assigns its topics again.
- ownership: `OwnershipAssigner` assigns an unowned topic by compare-and-set, so that concurrent
  lookups agree on one owner. It picks the least-loaded live broker (placement: fewest assigned
  topics, then message rate) and passes over the broker named by /unloading/<topic> while another
  is live, so an unloaded topic moves. The broker's side of ownership (taking over after a
  restart, unloading, watching /ownership/) is herald.broker.core.ownership.
- routes: GetTopicRoute, every partition with its owner, owners assigned where there are none, 16
  partitions at a time from one `Placement` snapshot of the live brokers and their assigned counts,
  so the cluster's ownership records are read once per route, not once per partition.
- topics: GetTopicsOfNamespace, partitioned topics by their base name, for pattern consumers.

Besides LookupTopic: GetPartitionedTopicMetadata (n, or 0 when not partitioned; each partition,
`<topic>-partition-<i>`, is looked up and owned like a topic) and GetClusterInfo (the live brokers
with the load and topics of their last heartbeat). LookupTopic and GetTopicRoute refuse
(NotFound) a topic whose tenant or namespace does not exist and a partition past its topic's
count, as Pulsar's broker does (herald.metadata.resources: check_namespace, check_partition;
GetPartitionedTopicMetadata checks the namespace too): no owner is assigned to a topic that
cannot exist.

authorization: registration and heartbeats are the brokers' roles'; a topic's owner, route or
partitions need produce or consume on it; a namespace's topic list needs a grant there; the
cluster's brokers are any authenticated role's. Heartbeat is the one request past 64 KiB lookup
takes (it names every topic a broker owns), up to its 4 MiB receive limit.
"""
