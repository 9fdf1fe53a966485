"""``python -m janitor`` runs the CLI."""

from janitor.cli.app import main

main()
