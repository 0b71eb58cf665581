"""`herald admin`: the admin API from the command line, over herald.client.admin.

    herald admin [--url URL] [--json] <group> <command> [arguments]

Groups: tenants, namespaces, topics, subscriptions, schemas, tokens, brokers, dlq (dead letters). Output is for
people (tables and key: value lines) or, with --json, one JSON document for scripts (snake_case keys
named as in the admin contract, every field present, unset policies as null). A failed call prints one
line "error: <CODE>: <message>" on stderr and exits with status 1; a usage error exits with status 2.

Modules: `command` (the parser and how a command runs), `arguments` (the options every command takes,
argument types, command groups), `render` (tables and JSON), `policies` (policy flags), and a module
per resource with its commands and their handlers: `tokens` makes keys and JWTs (no call to the
admin API), `permissions` adds grant-permission / revoke-permission / permissions to the
`namespaces` and `topics` groups, `dlq` peeks at and replays dead letters through herald.dlq. It is
a client of Herald (herald.client, herald.dlq's peek and replay, common, api): it knows nothing of
the servers, nor of the other `herald` commands."""
