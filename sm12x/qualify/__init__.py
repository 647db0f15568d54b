"""`sm12x qualify`: one command from a booted rig to a checked, shareable bundle.

main.py the command; plan.py what runs for a recipe; steps.py the steps;
load.py the measuring client and the figures recomputed from its records;
bundle.py the result's model, its JSON Schema and the resumable folder;
facts.py the provenance (bench's, extended); scrub.py what never leaves the
machine; check.py `--check BUNDLE`; render_hash.py the recipe hash.
"""
