# One task runner for the loops a maintainer lives in. Every target is a thin
# name for a command documented in CONTRIBUTING.md; CI runs `scripts/test`
# (README.md, "Run the tests"), which is `make full`.
#
# The environment is scripts/test's (.cache/venv): `make full` builds it, the
# other targets use it as it is (run `make full` or `scripts/test --co -q` once).

PY ?= .cache/venv/bin/python
BIN := $(dir $(PY))

.PHONY: help fast full lint types regen check

help:
	@echo "make fast   the fast tier: no wheels, no Docker, no servers (under 2 minutes)"
	@echo "make full   the whole suite, as CI runs it (installs everything it needs)"
	@echo "make lint   ruff check, ruff format --check, shellcheck"
	@echo "make types  mypy on sm12x and verify"
	@echo "make regen  rewrite every generated file, then review git diff"
	@echo "make check  lint + types + fast: what to run before a commit"

fast:
	SM12X_TIER=fast SM12X_CACHE=$(CURDIR)/.cache $(PY) -m pytest -m fast -n 2 --dist loadfile -q

full:
	scripts/test

lint:
	$(BIN)ruff check .
	$(BIN)ruff format --check .
	SM12X_CACHE=$(CURDIR)/.cache $(PY) -m pytest -q -p no:xdist tests/unit/test_lint.py -k shellcheck

types:
	$(BIN)mypy --python-executable $(PY)

regen:
	PYTHON=$(PY) scripts/regen

check: lint types fast
