"""The `herald` command: one module per command family (main: services, produce, consume; admin:
the admin API; admin_security: tokens and grants). Nothing imports it."""
