"""Where the project's data lives: a source checkout or an installed wheel.

The wheel carries versions.env, recipes/ and patches/ under sm12x/data/
(pyproject.toml force-includes them); a checkout has them at its root.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent


def checkout_root() -> Path | None:
    """The source checkout sm12x runs from (an editable install), else None."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "versions.env").is_file():
        return _CHECKOUT
    return None


def data_root() -> Path:
    return checkout_root() or _PACKAGE / "data"


def data_path(name: str) -> Path:
    """Path of a top-level data file or folder (versions.env, recipes, patches)."""
    candidate = data_root() / name
    if not candidate.exists():
        raise FileNotFoundError(
            f"sm12x data {name!r} not found at {candidate}: "
            "reinstall sm12x or run from a complete checkout"
        )
    return candidate
