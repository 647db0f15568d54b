"""The one error type for bad input.

Anything a user can get wrong (a recipe, an environment variable, a machine
without the GPUs a recipe needs) raises UserError with a single line that
says what is wrong and what to do. sm12x.cli prints it without a traceback
and exits non-zero; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input: the message is one line, shown as is, exit status 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        # One line: callers build messages from parts that may contain
        # newlines (YAML snippets, nvidia-smi output); fold them.
        super().__init__(" ".join(message.split("\n")).strip())

    @property
    def message(self) -> str:
        return str(self)
