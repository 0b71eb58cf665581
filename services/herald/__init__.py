"""Herald: durable, distributed publish/subscribe messaging with Pulsar's semantics.

Users start with `herald.client`; the next engineer with docs/architecture.md (the map, the walk
of a message, the layers). Each package's docstring is that package's reference.

Packages, top layer first (import-linter keeps them so: pyproject.toml):

    cli                      the `herald` command; nothing imports it
    standalone, local_cluster    every service in one process; every service as its own process
    dlq                      the dlq-worker, a client of Herald
    broker, lookup, client, proxy    independent of each other
    storage                  storage/node (the service) and storage/client (the broker's side)
    metadata                 the MetadataStore and its backends
    common                   codec, transport, security, http, errors, config, tracing...
    api                      generated from proto/ by proto/generate.py, never edited

Every service is configured by one settings dataclass (`<service>/settings.py`), loaded by
herald.common.config.load_settings: defaults < the service's table of a `--config` TOML file <
HERALD_<SERVICE>_<SETTING> < command-line flags.

standalone (`herald standalone`, herald.standalone.Standalone): lookup, broker, storage, proxy and
dlq-worker in one process and one event loop, each server on its own loopback gRPC port, on the
embedded SQLite metadata store (`<data-dir>/metadata.db`) and one storage directory
(`<data-dir>/storage`). Their metrics share one Prometheus registry, served with /healthz and
/readyz at one HTTP endpoint; it is ready once all of them started, while every one of them is
ready. Security: one set of flags for every service. With authentication on it mints the services'
internal token (role `standalone`: their broker, proxy and dlq-worker role) with the secret key,
unless it is given one (`--internal-token-file`); with mutual TLS its dlq-worker presents the
standalone's own certificate.

local_cluster (`herald local-cluster`, herald.local_cluster.LocalCluster; the `local_cluster` and
`make_local_cluster` test fixtures): redis-server (append-only, fsync always), N storage nodes,
lookup, M brokers and `proxies` proxies (0 by default; `proxy_url` is the first one's), each a
separate process on free loopback ports with its log in `<base>/logs/` (herald.local_process's
ClusterProcess; `metadata="etcd"` runs herald.local_etcd's members instead of redis-server). Any of them can be killed
(SIGKILL), paused (SIGSTOP), resumed, stopped and restarted: the chaos tests drive the same code.
"""

__version__ = "0.1.0"
