"""``python -m janitor`` runs the CLI."""

from janitor.cli import main

main()
