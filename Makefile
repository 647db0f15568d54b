# One task runner for the loops a maintainer lives in. Every target is a thin
# name for a command documented in CONTRIBUTING.md; CI runs `scripts/test`
# (README.md, "Run the tests"), which is `make full`.
#
# The environment is scripts/test's (.cache/venv): `make full` builds it, and
# in a fresh clone the other targets build it first (scripts/test --co -q: the
# setup without Docker or the 3.12 leg, nothing run), then use it as it is.

PY ?= .cache/venv/bin/python
BIN := $(dir $(PY))
VENV := .cache/venv/bin/python
.DEFAULT_GOAL := help

.PHONY: help fast full lint types regen check hooks

# The commit-msg hook (CONTRIBUTING.md, "Commits"): installed by whichever
# target a contributor runs first; nothing outside a git checkout.
HOOK := $(shell git rev-parse --git-path hooks/commit-msg 2>/dev/null)
ifneq ($(HOOK),)
$(HOOK): scripts/commit-msg
	@mkdir -p $(dir $(HOOK))
	install -m 755 scripts/commit-msg $(HOOK)
help fast lint types regen check: | $(HOOK)
hooks: $(HOOK)
else
hooks:
	@echo "make hooks: not a git checkout, no hook to install"
endif

help:
	@echo "make fast   the fast tier: no wheels, no Docker, no servers (under 2 minutes)"
	@echo "make full   the whole suite, as CI runs it (installs everything it needs)"
	@echo "make lint   ruff check, ruff format --check, shellcheck"
	@echo "make types  mypy on sm12x and verify"
	@echo "make regen  rewrite every generated file, then review git diff"
	@echo "make check  lint + types + fast: what to run before a commit"
	@echo "make hooks  install the commit-msg hook (every target here does it first)"

# Only the default environment is built here; a PY of your own is used as given.
# scripts/test's steps and their `ok:` lines show as they go (its errors go to
# stderr, unfiltered; pytest's collection of one module, which proves the
# environment imports, does not), then the build's own time against its own
# budget: the fast tier's 2 minutes count its tests only.
ENV_BUDGET_S ?= 900
$(VENV):
	@echo "make: no $(VENV) in this clone: building it first, once (scripts/test's setup without Docker or Python 3.12; several minutes)"
	@start=$$(date +%s); said=$$(mktemp); \
	{ SM12X_NO_DOCKER=1 SM12X_NO_PY312=1 scripts/test --co -q tests/unit/test_cli.py; echo $$? > "$$said"; } \
	  | grep --line-buffered -E '==>|^ok: '; \
	status=$$(cat "$$said"); rm -f "$$said"; \
	took=$$(( $$(date +%s) - start )); \
	if [ "$$status" != 0 ]; then echo "make: building the environment failed (exit $$status) after $$took s"; exit 1; fi; \
	if [ $$took -le $(ENV_BUDGET_S) ]; then verdict=within; else verdict=over; fi; \
	echo "make: the environment took $$took s, $$verdict its budget of $(ENV_BUDGET_S) s (once per clone; not counted in the fast tier's budget below)"

ifeq ($(PY),$(VENV))
fast lint types regen: | $(VENV)
endif

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
