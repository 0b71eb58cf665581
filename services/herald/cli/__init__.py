"""The `herald` command. `main` holds the top-level parser and runs a command; each family adds its
own subcommands: `services` (standalone, lookup, broker, storage, proxy, dlq-worker, operator,
local-cluster, their shared flags in `service_flags`), `produce_consume` (`produce`, `consume`, over
`output_format` and `client_command`), and the `admin` package.
`client_options` are the client options (URL, security flags) of every command that opens a client and
the one rule deciding them (flag > HERALD_* > context > default); `context` is `herald context` over
`context_store` (the files). `vocabulary` spells each concept once. Nothing imports this package.

`herald operator` imports herald_operator (operator/) only when it runs, so the command works
without kopf installed for every other command. tests/chart checks every flag and HERALD_*
variable the Helm chart passes against this parser and the settings classes."""
