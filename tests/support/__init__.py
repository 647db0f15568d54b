"""Helpers shared by the test suites (wheels, patched trees, docker)."""
