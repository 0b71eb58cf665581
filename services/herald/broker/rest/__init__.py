"""Pulsar's admin REST API and HTTP lookup, served on the broker's web port (`web_port`): an aiohttp
application that only translates, over the same core the gRPC admin uses (herald.broker.core:
BrokerService's topic administration, AdminAccess's authorization decisions; herald.metadata:
Resources and Permissions).

- server: the aiohttp application and its site on the web port (HTTPS with the broker's certificate).
- app: what every route shares: authentication (`Authorization: Bearer <token>` checked by the
  broker's Authenticator), authorization (`authorize`), error bodies {"reason": ...} with Pulsar's
  statuses (errors), a topic's owner (`on_owner`); paths: names, flags and bodies of a request.
- tenants: /admin/v2/tenants, /admin/v2/namespaces and their policies, /admin/v2/clusters, /brokers.
- topics: /admin/v2/{domain}/{tenant}/{namespace}[/{topic}...] and subscriptions; peek: a message.
- lookup: /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}.
- shapes: Herald's stats and policies as Pulsar's JSON.

A topic call reaching a broker that does not own the topic asks lookup for its owner (which assigns
one when there is none): when that is this broker the call is made here, else the request is
redirected (307) to the owner's web service as it registered it, as Pulsar's brokers do.
Partitions are visited one by one."""
