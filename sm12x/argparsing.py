"""The argument parser every sm12x command uses: no abbreviations, no echoed values.

Python's argparse expands an unambiguous prefix by default, so
`sm12x launch --api-key sk-...` became `--api-key-file sk-...` and the error
that followed printed the key. sm12x's options are spelled out in full
(allow_abbrev=False), and an option the parser does not know is named in the
error without the values around it: a mistyped flag may be followed by a
secret.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def names_only(tokens: Sequence[str]) -> str:
    """The option names among tokens, never their values (`--x=1` shows `--x`)."""
    names = [t.split("=", 1)[0] for t in tokens if t.startswith("-")]
    shown = " ".join(names) if names else "a value"
    hidden = len(tokens) - len(names)
    return shown + (f" (and {hidden} value(s), not shown)" if hidden else "")


class StrictParser(argparse.ArgumentParser):
    """An ArgumentParser that never abbreviates and never echoes unknown values."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            # Said by the subcommand's parser where there is one, so the line
            # begins `sm12x <cmd>: error:` like every other error of that command.
            owner = self.subparsers.get(getattr(parsed, "command", None) or "", self)
            owner.error(
                f"unrecognized arguments: {names_only(unknown)}: write the full "
                "option name (sm12x does not expand prefixes); see --help"
            )
        return parsed

    @property
    def subparsers(self) -> dict[str, argparse.ArgumentParser]:
        """The subcommands' parsers by name (none for a parser without them)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}
