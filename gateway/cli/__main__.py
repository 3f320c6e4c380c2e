"""`python -m gateway.cli`: the `gateway` command."""

from gateway.cli.main import main

main()
