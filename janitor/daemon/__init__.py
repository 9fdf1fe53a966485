"""The background service: a short supervisor and the services it starts and stops."""
