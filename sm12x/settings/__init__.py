"""One set of settings for every sm12x command.

    loaded = sm12x.settings.from_args(args, "launch")   # flags > environment > .env > default
    loaded.settings.model_dir, loaded.origin("model_dir")

sm12x.settings.model has the settings (one name each: SM12X_<NAME>, --<name>),
sm12x.settings.sources where they come from, sm12x.settings.cli the flags and
--explain; sm12x.settings.table the README's table of them.
"""

from sm12x.settings.cli import add_arguments, explain, explain_variables, from_args
from sm12x.settings.model import COMMANDS, Settings, env_name, flag_name, for_command, meta
from sm12x.settings.sources import Loaded, Origin, load

__all__ = [
    "COMMANDS",
    "Loaded",
    "Origin",
    "Settings",
    "add_arguments",
    "env_name",
    "explain",
    "explain_variables",
    "flag_name",
    "for_command",
    "from_args",
    "load",
    "meta",
]
