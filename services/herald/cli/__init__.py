"""The `herald` command. `main` holds the top-level parser and runs a command; each family adds its
own subcommands: `services` (standalone, lookup, broker, storage, proxy, dlq-worker, operator,
local-cluster, their shared flags in `service_flags`), `produce_consume`, and the `admin` package.
`client_options` are the security flags of every command that opens a client. Nothing imports it."""
