"""Admission control: measure a volume, admit or refuse a reservation, pick the jobs at risk."""
