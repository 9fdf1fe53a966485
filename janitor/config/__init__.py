"""What the user configured: the service settings and the cleanup/reservation policy."""
