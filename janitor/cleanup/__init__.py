"""Cleanup as a flow of values: scan -> units -> plan (pure) -> delete (the deleter) -> sweep."""
