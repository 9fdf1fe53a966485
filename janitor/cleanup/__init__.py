"""Cleanup as a flow of values: scan -> units -> plan (pure) -> apply (a deleter per tree) ->
sweep."""
