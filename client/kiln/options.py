"""Options of the kiln backend: torch.compile(..., options={...}).

Each option is declared once in OPTIONS (name, type, default, help); adding a
row is all it takes to add an option. Unknown keys are rejected.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    name: str
    type: type
    default: Any
    help: str
    env: str | None = None  # environment variable supplying the default


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("model_caching", bool, True,
               "let the daemon cache compiled graphs on disk",
               env="KILN_MODEL_CACHING"),
    OptionSpec("socket", str, None,
               "daemon socket path (default: $KILN_SOCKET, "
               "$XDG_RUNTIME_DIR/kiln/kilnd.sock or /tmp/kiln-<uid>/kilnd.sock)",
               env="KILN_SOCKET"),
    OptionSpec("autostart", bool, True,
               "start kilnd when nothing answers on the socket",
               env="KILN_AUTOSTART"),
)

_SPECS = {spec.name: spec for spec in OPTIONS}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _coerce(spec: OptionSpec, value: Any) -> Any:
    if value is None:
        return None
    if spec.type is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(f"kiln option {spec.name!r} expects a bool, got {value!r}")
    if spec.type is str:
        if isinstance(value, (str, os.PathLike)):
            return os.fspath(value)
        raise ValueError(f"kiln option {spec.name!r} expects a string, got {value!r}")
    return spec.type(value)


class _OptionsBase:
    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> "KilnOptions":
        """Validates user options and fills defaults (environment, then table)."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(_SPECS))
        if unknown:
            raise ValueError(
                f"unknown kiln option(s) {', '.join(map(repr, unknown))}; "
                f"valid options: {', '.join(sorted(_SPECS))}")
        values: dict[str, Any] = {}
        for spec in OPTIONS:
            if spec.name in options:
                values[spec.name] = _coerce(spec, options[spec.name])
            elif spec.env and os.environ.get(spec.env) is not None:
                values[spec.name] = _coerce(spec, os.environ[spec.env])
            else:
                values[spec.name] = spec.default
        return cls(**values)


# The options as a frozen dataclass, generated from the table above so an
# option is declared in exactly one place.
KilnOptions = dataclasses.make_dataclass(
    "KilnOptions",
    [(spec.name, Any, dataclasses.field(default=spec.default)) for spec in OPTIONS],
    bases=(_OptionsBase,),
    frozen=True,
)
KilnOptions.__module__ = __name__
