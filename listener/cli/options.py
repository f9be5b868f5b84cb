"""The listener's command-line options, built once from the fields of ListenerConfig.

Every field of `listener.config.ListenerConfig` whose metadata has a "help" text
is an option of each command decorated with `listener_options` (`ceaseless up`
and `ceaseless listen`): its flag is `metadata["flag"]` or `--field-name`, its
type and default are the field's, its help text is the metadata's. `--log-format`
is the one option that is not the listener's: it only configures logging here.

Guarantees: adding an option is adding a field to ListenerConfig, nothing here;
the value a user types reaches the config as typed, except that `--workdir` and
`--forge-root` are made absolute, a repeatable option given no times is None, and
an option left out whose field has a default_factory (`--worker-id`) gets the
factory's value.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from listener.cli.common import fail
from listener.config import ConfigError, ListenerConfig

LOG_FORMAT = "log_format"

# What the dataclass cannot say: how a typed value becomes the field's value.
# Agents run in --workdir (and --forge-root) long after the shell's directory is forgotten.
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "workdir": lambda path: str(Path(path).resolve()),
    "forge_root": lambda path: str(Path(path).resolve()),
}


def option_fields() -> list[dataclasses.Field[Any]]:
    """The fields of ListenerConfig that are command-line options, in declaration order."""
    return [field for field in dataclasses.fields(ListenerConfig) if "help" in field.metadata]


def flag(field: dataclasses.Field[Any]) -> str:
    """The option's flag, e.g. --kind for the field `kinds`, --poll-interval for poll_interval."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


@dataclass(frozen=True)
class ListenerOptions:
    """What the user typed: the listener's options given, and how to log."""

    values: Mapping[str, object]
    log_format: str

    def config(self, url: str) -> ListenerConfig:
        """The listener's configuration for the database at `url`; exits when it is unusable."""
        try:
            return ListenerConfig(url=url, **self.values)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise fail(str(exc)) from None


def _parameter(field: dataclasses.Field[Any], annotation: Any) -> inspect.Parameter:
    default: object = field.default
    if default is dataclasses.MISSING:
        if field.default_factory is dataclasses.MISSING:
            default = inspect.Parameter.empty  # a required option
        else:
            # Not given: the factory chooses, when the config is built.
            annotation, default = annotation | None, None
    return inspect.Parameter(
        field.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[
            annotation,
            typer.Option(
                flag(field), help=field.metadata["help"], envvar=field.metadata.get("envvar")
            ),
        ],
    )


def _signature() -> inspect.Signature:
    types = typing.get_type_hints(ListenerConfig)
    fields = option_fields()
    names = {field.name for field in fields}
    if LOG_FORMAT in names:
        raise TypeError(f"ListenerConfig.{LOG_FORMAT} clashes with the CLI's --log-format")
    if stale := _CONVERT.keys() - names:
        raise TypeError(f"listener/cli/options.py converts {sorted(stale)}: no such options")
    log_format = inspect.Parameter(
        LOG_FORMAT,
        inspect.Parameter.KEYWORD_ONLY,
        default="text",
        annotation=Annotated[str, typer.Option(help="Log lines as 'text' or 'json'.")],
    )
    parameters = [_parameter(field, types[field.name]) for field in fields]
    return inspect.Signature([*parameters, log_format], return_annotation=None)


def _values(typed: Mapping[str, Any]) -> dict[str, object]:
    values: dict[str, object] = {}
    for field in option_fields():
        value = typed[field.name]
        if isinstance(value, list | tuple):
            value = list(value) or None
        if value is None and field.default_factory is not dataclasses.MISSING:
            continue
        if value is not None and field.name in _CONVERT:
            value = _CONVERT[field.name](value)
        values[field.name] = value
    return values


def listener_options(
    command: Callable[[ListenerOptions], None],
) -> Callable[..., None]:
    """Give `command` every listener option (and --log-format) as typer parameters.

    typer reads the parameters from the returned function's `__signature__`; the
    command itself receives them parsed, as one ListenerOptions.
    """

    def parsed(**typed: Any) -> None:
        log_format = typed.pop(LOG_FORMAT)
        command(ListenerOptions(values=_values(typed), log_format=log_format))

    parsed.__name__ = command.__name__
    parsed.__qualname__ = command.__qualname__
    parsed.__doc__ = command.__doc__
    parsed.__module__ = command.__module__
    parsed.__signature__ = _signature()  # type: ignore[attr-defined]
    return parsed
