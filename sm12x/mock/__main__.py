"""`python -m sm12x.mock [FLAG ...]`: the same as `sm12x mock-server [FLAG ...]`."""

from __future__ import annotations

import sys

from sm12x.cli import main

if __name__ == "__main__":
    sys.exit(main(["mock-server", *sys.argv[1:]]))
