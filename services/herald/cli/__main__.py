"""`python -m herald.cli`: the `herald` command."""

from herald.cli.main import main

main()
