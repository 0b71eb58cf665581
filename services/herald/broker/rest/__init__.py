"""Pulsar's admin REST API and HTTP lookup, served on the broker's web port (`web_port`): an aiohttp
application that only translates, over the same core the gRPC admin uses (herald.broker.core:
BrokerService's topic administration, AdminAccess's authorization decisions; herald.metadata:
Resources and Permissions).

- app: the application, its authentication (`Authorization: Bearer <token>` checked by the broker's
  Authenticator) and authorization middleware, error bodies {"reason": ...} with Pulsar's statuses.
- tenants: /admin/v2/tenants, /admin/v2/namespaces and their policies, /admin/v2/clusters, /brokers.
- topics: /admin/v2/{domain}/{tenant}/{namespace}[/{topic}...] and subscriptions.
- lookup: /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}.
- shapes: Herald's stats and policies as Pulsar's JSON.

A topic call reaching a broker that does not own the topic answers 503 (Pulsar's "not ready": the
caller looks the topic up and asks its owner); partitions are visited one by one here."""
