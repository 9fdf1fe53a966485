"""End-to-end scenarios that cross layers: the pipeline through the guard and the daemon."""
