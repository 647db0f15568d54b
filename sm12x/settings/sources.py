"""Where settings come from, and the record of where each one came from.

Layers, each later one winning: the defaults, `.env`, the environment, the
command's flags. That is compose's order too (the shell's environment wins
over .env), so `docker compose up` and `sm12x <command>` read one `.env` the
same way.

Which `.env`: --env-file, else SM12X_ENV_FILE, else `.env` in the current
folder, else `.env` in the sm12x checkout (the project folder, beside
compose.yaml). A relative path in it is taken from its own folder, so
`SM12X_MODEL_DIR=models/x` names the same folder wherever a command runs; a
relative path in the environment or a flag is taken from the current folder.

Old names (SM12X_MODEL_PATH, HEAD_ADDR, ...) are still read, each with one
warning naming the new one; where both are set, the new one wins.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from dotenv.parser import parse_stream
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from sm12x import bounded
from sm12x.errors import UserError
from sm12x.fields import describe
from sm12x.paths import checkout_root
from sm12x.settings.model import LAYERS, Settings, env_name, flag_name, meta, names

ENV_FILE_ENV = "SM12X_ENV_FILE"


@dataclass(frozen=True)
class Origin:
    """Where one value came from."""

    kind: str  # default | .env | environment | flag
    name: str = ""  # the variable or flag as it was spelled
    file: Path | None = None
    raw: str | None = None  # the text given, before a path was resolved
    old: bool = False  # read under its old name

    def __str__(self) -> str:
        if self.kind == "default":
            return "default"
        if self.kind == "flag":
            return f"flag {self.name}"
        where = f".env ({self.file})" if self.kind == ".env" else "environment"
        return f"{where}, old name {self.name}" if self.old else where


@dataclass(frozen=True)
class EnvFile:
    path: Path | None
    how: str  # why this file: --env-file, SM12X_ENV_FILE, the current folder, ...


def find_env_file(
    explicit: str | os.PathLike | None, environ: Mapping[str, str], cwd: Path
) -> EnvFile:
    """The .env to read (see the module docstring), or none."""
    given, how = (explicit, "--env-file") if explicit else (environ.get(ENV_FILE_ENV), ENV_FILE_ENV)
    if given:
        path = (cwd / Path(given)).absolute()
        if not path.is_file() and str(given) != os.devnull:
            raise UserError(f"{how} {given}: no such file (copy .env.example to make one)")
        return EnvFile(path, how)
    candidates = [(cwd / ".env", "the current folder")]
    root = checkout_root()
    if root is not None:
        candidates.append((root / ".env", "the sm12x checkout"))
    for path, how in candidates:
        if path.is_file():
            return EnvFile(path.absolute(), how)
    return EnvFile(None, "no .env in " + " or ".join(str(p.parent) for p, _ in candidates))


# A .env holds a few dozen settings: far below these.
ENV_FILE_LIMIT = 1 << 20
EXPANDED_LIMIT = 1 << 20
_REFERENCE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")


def read_env_file(env_file: EnvFile) -> dict[str, str]:
    """The file's variables, read with every bound: its size, each line parsed
    (a line python-dotenv would skip with a warning is an error naming it), and
    what `${NAME}` interpolation would make of each value, measured before it
    is made (a file of lines each doubling the last ends in MemoryError)."""
    if env_file.path is None or str(env_file.path) == os.devnull:
        return {}
    path = env_file.path
    try:
        text = bounded.read_text(path, ENV_FILE_LIMIT)
    except bounded.TooBig as exc:
        raise UserError(f"{path}: {exc}; a .env holds a few settings (NAME=value lines)") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UserError(f"{path}: cannot read it ({reason})") from None
    sizes: dict[str, int] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            raise UserError(
                f"{path}, line {binding.original.line}: cannot be read as NAME=value (an "
                "unterminated quote?); fix or remove that line"
            )
        if binding.key is None or binding.value is None:
            continue
        size = len(binding.value) + sum(
            sizes.get(ref["name"], len(os.environ.get(ref["name"], ""))) + len(ref["default"] or "")
            for ref in _REFERENCE.finditer(binding.value)
        )
        if size > EXPANDED_LIMIT:
            raise UserError(
                f"{path}, line {binding.original.line}: {binding.key} would expand to more "
                f"than {EXPANDED_LIMIT} bytes (its ${{...}} references); write the value out"
            )
        sizes[binding.key] = size
    values = dotenv_values(stream=io.StringIO(text))
    return {k: v for k, v in values.items() if v is not None}


class Layer(PydanticBaseSettingsSource):
    """The variables of one layer (.env or the environment), by setting.

    Empty values count as unset, as compose's `${VAR:-}` does. Records where
    each value came from in `found` and the old names it read in `warnings`.
    """

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        values: Mapping[str, str],
        kind: str,
        base: Path,
        file: Path | None = None,
    ) -> None:
        super().__init__(settings_cls)
        self.values = values
        self.kind = kind
        self.base = base
        self.file = file
        self.found: dict[str, Origin] = {}
        self.warnings: list[str] = []

    def where(self) -> str:
        return f"in {self.file}" if self.kind == ".env" else "in the environment"

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        spelled, value = self._lookup(field_name)
        return value, spelled or field_name, False

    def _lookup(self, name: str) -> tuple[str | None, str | None]:
        new = env_name(name)
        value = self.values.get(new, "").strip()
        set_old = [o for o in meta(name).old if self.values.get(o, "").strip()]
        if value:
            for old in set_old:
                self.warnings.append(
                    f"{old} {self.where()} is ignored: {new} is set too (remove {old})"
                )
            return new, value
        if set_old:
            old = set_old[0]
            self.warnings.append(
                f"{old} {self.where()} is the old name of {new}: rename it (the old name "
                "will stop working in a later release)"
            )
            return old, self.values[old].strip()
        return None, None

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in names():
            spelled, value = self._lookup(name)
            if value is None:
                continue
            raw = value
            if meta(name).path:
                value = resolve(value, self.base)
            self.found[name] = Origin(
                self.kind, str(spelled), self.file, raw, old=spelled != env_name(name)
            )
            out[name] = value
        return out


def resolve(value: str, base: Path) -> str:
    """A path as given, made absolute against `base` when it is relative."""
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base / path).absolute())


@dataclass(frozen=True)
class Loaded:
    """The settings of one command run, and where each value came from."""

    settings: Settings
    origins: dict[str, Origin]
    env_file: EnvFile
    dotenv: Mapping[str, str]
    environ: Mapping[str, str]
    warnings: tuple[str, ...] = field(default=())

    def origin(self, name: str) -> Origin:
        return self.origins.get(name, Origin("default"))

    def given(self, name: str) -> bool:
        """True when the value was set somewhere, not the default."""
        return name in self.origins

    def variable(self, name: str) -> tuple[str | None, Origin]:
        """A variable that is not a setting (a recipe's site variable such as
        NCCL_IB_HCA): the environment's, else .env's."""
        for values, kind in ((self.environ, "environment"), (self.dotenv, ".env")):
            value = values.get(name, "").strip()
            if value:
                return value, Origin(kind, name, self.env_file.path if kind == ".env" else None)
        return None, Origin("default")

    def variables(self) -> dict[str, str]:
        """Every non-empty variable, the environment's over .env's (what a
        placeholder such as "$NCCL_IB_HCA" resolves from)."""
        merged = {k: v for k, v in self.dotenv.items() if v}
        merged.update({k: v for k, v in self.environ.items() if v})
        return merged


def load(
    flags: Mapping[str, Any] | None = None,
    env_file: str | os.PathLike | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> Loaded:
    """The settings from flags (setting name -> value), the environment and .env.

    flag_names: how a flag was spelled where it is not --<name> (an old
    spelling, a positional argument), for --explain and errors."""
    flag_names = dict(flag_names or {})
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    found = find_env_file(env_file, environ, cwd)
    dotenv = read_env_file(found)
    dotenv_layer = Layer(
        Settings, dotenv, ".env", found.path.parent if found.path else cwd, found.path
    )
    environ_layer = Layer(Settings, environ, "environment", cwd)
    for name in [n for n in flags if meta(n).path]:
        flags[name] = resolve(str(flags[name]), cwd)
    token = LAYERS.set((environ_layer, dotenv_layer))
    try:
        settings = Settings(**flags)
    except ValidationError as exc:
        raise _error(exc, flags, flag_names, (environ_layer, dotenv_layer)) from None
    finally:
        LAYERS.reset(token)
    origins: dict[str, Origin] = {}
    for name in names():
        if name in flags:
            origins[name] = Origin(
                "flag", flag_names.get(name, flag_name(name)), None, str(flags[name])
            )
        elif name in environ_layer.found:
            origins[name] = environ_layer.found[name]
        elif name in dotenv_layer.found:
            origins[name] = dotenv_layer.found[name]
    warnings = tuple(dict.fromkeys([*environ_layer.warnings, *dotenv_layer.warnings]))
    return Loaded(settings, origins, found, dotenv, environ, warnings)


def _error(
    exc: ValidationError,
    flags: Mapping[str, Any],
    flag_names: Mapping[str, str],
    layers: tuple[Layer, ...],
) -> UserError:
    """One line: which value, from where, what is wrong, what to do."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    problem = describe(error)
    if name not in names():
        return UserError(problem)
    secret = meta(name).secret
    if name in flags:
        shown = "" if secret else f"={_shown(flags[name])}"
        return UserError(f"{flag_names.get(name, flag_name(name))}{shown}: {problem}")
    for layer in layers:
        origin = layer.found.get(name)
        if origin is not None:
            shown = "" if secret else f"={_shown(origin.raw)}"
            return UserError(f"{origin.name}{shown} {layer.where()}: {problem}; fix it there")
    return UserError(f"{env_name(name)}: {problem}")


def _shown(value: Any) -> str:
    text = str(value)
    return repr(text if len(text) <= 80 else text[:77] + "...")
