"""SWE-style repository tasks (see docs/swe.md): made offline, graded with structured results."""
