"""Cleanup as a pipeline of values: scan -> units -> plan (pure) -> apply (deletes) -> sweep."""
