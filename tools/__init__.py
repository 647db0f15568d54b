"""Maintainer tools run from a checkout (`python -m tools.X`): the regeneration
registry (`regen`) and the golden launch commands it writes (`golden`)."""
