"""Configuring a run: the sections, value coercion, cross-checks, records and the registry."""
