"""The Herald Kubernetes operator: reconciles Topic and Subscription custom resources (group
herald.io, CRDs in operator/crds/) into Herald through the admin API, kopf running the handlers.

It is a client of Herald: it may import herald.client, herald.common and herald.api, and knows
nothing of the brokers', lookup's or storage's code. Modules, by concept: `settings` (from the
environment), `desired` (a resource's spec as the Herald state it asks for), `reconcile` (making
Herald so, through the AdminClient), `status` (conditions and status fields), `handlers` (the kopf
handlers, registered on a registry) and `runner` (running kopf).
"""
