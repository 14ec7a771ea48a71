"""Options of the kiln backend: torch.compile(..., options={...}).

Each option is declared once in OPTIONS (name, type, default, help); adding a
row is all it takes to add an option. Unknown keys are rejected.

`config` is the runtime config the daemon applies to every graph compiled
for the model (like OpenVINO's `config` option): its keys are declared once
in CONFIG_KEYS and sent as CompileRequest.options, so they are part of the
daemon's cache key.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

# Upper bound of config num_threads; the daemon enforces the same bound and
# never gives a graph more threads than its own --threads.
MAX_NUM_THREADS = 256


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    name: str
    valid: str                      # the valid values, for error messages
    choices: tuple[str, ...] = ()   # for string keys
    help: str = ""


CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("num_threads", f"an integer from 1 to {MAX_NUM_THREADS}",
              help="threads one execute may use (default and cap: kilnd --threads)"),
    ConfigKey("hint", "latency, throughput", ("latency", "throughput"),
              help="latency: one execute may use all num_threads threads; throughput: "
                   "each execute runs on one thread, so concurrent callers run side by side"),
    ConfigKey("precision", "f32, bf16, auto", ("f32", "bf16", "auto"),
              help="bf16: convolutions and matrix products compute in bf16 "
                   "(tensors stay f32); auto: bf16 where the CPU computes it natively "
                   "(AVX512-BF16, AMX), f32 elsewhere"),
    ConfigKey("layout", "auto, nchw, nhwc, blocked", ("auto", "nchw", "nhwc", "blocked"),
              help="auto: activations between convolutions stay in the layout this CPU's "
                   "convolutions are fastest in (NHWC, or 8-channel blocked on AVX2 where it "
                   "pays); nchw: every op reads and writes NCHW; nhwc / blocked force one "
                   "(for comparisons)"),
    ConfigKey("branches", "off, auto, on", ("off", "auto", "on"),
              help="independent steps (branches) run concurrently: off: never; auto: where "
                   "the graph's first runs show it pays; on: always (hint latency, 2+ threads)"),
)
_CONFIG_KEYS = {key.name: key for key in CONFIG_KEYS}


def _valid_config_keys() -> str:
    return "; ".join(f"{key.name} ({key.valid})" for key in CONFIG_KEYS)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """The daemon's runtime config for a compiled graph; None = daemon default."""
    num_threads: int | None = None
    hint: str | None = None
    precision: str | None = None
    layout: str | None = None
    branches: str | None = None

    @classmethod
    def parse(cls, value: Any) -> "RuntimeConfig":
        """From a mapping or a "key=value,key=value" string (KILN_CONFIG)."""
        if isinstance(value, RuntimeConfig):
            return value
        if isinstance(value, str):
            items: dict[str, Any] = {}
            for part in filter(None, (p.strip() for p in value.split(","))):
                key, sep, val = part.partition("=")
                if not sep:
                    raise ValueError(f"kiln config {value!r}: expected key=value pairs separated "
                                     f"by commas, got {part!r}; valid keys: {_valid_config_keys()}")
                items[key.strip()] = val.strip()
            value = items
        if not isinstance(value, Mapping):
            raise ValueError(f"kiln option 'config' expects a dict, got {value!r}; "
                             f"valid keys: {_valid_config_keys()}")
        unknown = sorted(set(value) - set(_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"unknown kiln config key(s) {', '.join(map(repr, unknown))}; "
                             f"valid keys: {_valid_config_keys()}")
        fields: dict[str, Any] = {}
        for name, raw in value.items():
            key = _CONFIG_KEYS[name]
            if name == "num_threads":
                number = raw
                if isinstance(raw, str) and raw.strip().isdigit():
                    number = int(raw)
                if isinstance(number, bool) or not isinstance(number, int) \
                        or not 1 <= number <= MAX_NUM_THREADS:
                    raise ValueError(f"kiln config num_threads={raw!r} is invalid: "
                                     f"expected {key.valid}")
                fields[name] = number
            else:
                text = raw.strip().lower() if isinstance(raw, str) else raw
                if text not in key.choices:
                    raise ValueError(f"kiln config {name}={raw!r} is invalid: "
                                     f"expected one of {key.valid}")
                fields[name] = text
        return cls(**fields)

    def updated(self, other: "RuntimeConfig") -> "RuntimeConfig":
        """This config with every key that `other` sets taken from `other`."""
        return dataclasses.replace(self, **{
            k: v for k, v in dataclasses.asdict(other).items() if v is not None})

    def to_request(self) -> dict[str, str]:
        """CompileRequest.options: the keys that are set, as strings."""
        return {k: str(v) for k, v in dataclasses.asdict(self).items() if v is not None}


def op_name(op: Any) -> str:
    """"aten.add.Tensor" for an OpOverload, "aten.add" for an
    OpOverloadPacket, a string as given (without a "torch.ops." prefix)."""
    import torch
    if isinstance(op, str):
        name = op.strip()
        return name[len("torch.ops."):] if name.startswith("torch.ops.") else name
    if isinstance(op, torch._ops.OpOverload):
        return str(op)
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op._qualified_op_name.replace("::", ".")
    raise ValueError(f"expected an ATen op (e.g. torch.ops.aten.relu.default) or its name, "
                     f"got {op!r}")


def resolve_op(name: str) -> Any:
    """The OpOverload or OpOverloadPacket torch.ops holds for a name."""
    import torch
    parts = name.split(".")
    if len(parts) not in (2, 3):
        raise ValueError(f"{name!r} is not an op name like 'aten.relu' or 'aten.relu.default'")
    try:
        op = getattr(getattr(torch.ops, parts[0]), parts[1])
        return getattr(op, parts[2]) if len(parts) == 3 else op
    except (AttributeError, RuntimeError) as e:
        raise ValueError(f"no ATen op named {name!r}") from e


class OpList(tuple):
    """Ops named by OpOverload/OpOverloadPacket objects or names, as names;
    from the environment, names separated by commas."""

    @classmethod
    def parse(cls, value: Any, option: str) -> "OpList":
        if isinstance(value, str):
            value = [v for v in (p.strip() for p in value.split(",")) if v]
        elif not isinstance(value, (list, tuple, set, frozenset)):
            value = [value]
        try:
            names = [op_name(v) for v in value]
            for name in names:
                resolve_op(name)
        except ValueError as e:
            raise ValueError(f"kiln option {option!r}: {e}") from None
        return cls(dict.fromkeys(names))

    def matches(self, target: Any) -> bool:
        """Whether a node target (OpOverload) is named, itself or by its packet."""
        name = str(target)
        return name in self or name.rsplit(".", 1)[0] in self


@dataclasses.dataclass(frozen=True)
class Choice:
    """A string option with a fixed set of values."""
    values: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Number:
    """An int or float option with a lower bound."""
    kind: type
    minimum: float
    exclusive: bool = False  # minimum itself not allowed


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    name: str
    type: Any  # a type, or a Choice / Number
    default: Any
    help: str
    env: str | None = None  # environment variable supplying the default
    # For mapping-like options: the environment's value supplies defaults
    # key by key, and the option's keys win.
    merge_env: bool = False


OPTIONS: tuple[OptionSpec, ...] = (
    # OpenVINO's backend's options, same names and meanings.
    OptionSpec("device", str, "CPU",
               "where compiled graphs run: one of the daemon's devices (kilnd reports "
               "them; today CPU)",
               env="KILN_DEVICE"),
    OptionSpec("model_caching", bool, True,
               "let the daemon cache compiled graphs on disk",
               env="KILN_MODEL_CACHING"),
    OptionSpec("cache_dir", str, None,
               "the daemon's cache directory, used when this client starts the daemon "
               "(a running daemon keeps its own; a different one is warned about once)",
               env="KILN_CACHE_DIR"),
    OptionSpec("decompositions", OpList, OpList(),
               "extra ATen ops to decompose before partitioning, as OpOverload objects "
               "or names (each must have a decomposition in torch._decomp)"),
    OptionSpec("auto_decompose", bool, True,
               "replace a node the daemon cannot run by its torch._decomp decomposition "
               "when the daemon runs every op of it",
               env="KILN_AUTO_DECOMPOSE"),
    OptionSpec("disabled_ops", OpList, OpList(),
               "ATen ops that stay in eager PyTorch, as OpOverload/OpOverloadPacket "
               "objects or names ('aten.relu', 'aten.add.Tensor'); env: comma-separated",
               env="KILN_DISABLED_OPS"),
    OptionSpec("aot_autograd", bool, False,
               "trace forward and backward with AOTAutograd, offering both graphs to "
               "the daemon (training)",
               env="KILN_AOT_AUTOGRAD"),
    OptionSpec("socket", str, None,
               "daemon socket path (default: $KILN_SOCKET, "
               "$XDG_RUNTIME_DIR/kiln/kilnd.sock or /tmp/kiln-<uid>/kilnd.sock), or "
               "'tcp:HOST:PORT' for a daemon started with --tcp on this host (token from "
               "$KILN_TOKEN, TLS with the CA in $KILN_TLS_CA)",
               env="KILN_SOCKET"),
    OptionSpec("autostart", bool, True,
               "start kilnd when nothing answers on the socket",
               env="KILN_AUTOSTART"),
    OptionSpec("daemon_idle_min", Number(float, 0), 10.0,
               "minutes a daemon this client starts stays up with no client session "
               "open and no call in flight before it shuts down (kilnd --idle-exit-min; "
               "0: never; a running daemon keeps its own setting)",
               env="KILN_DAEMON_IDLE_MIN"),
    OptionSpec("config", RuntimeConfig, RuntimeConfig(),
               "runtime config of the compiled graphs, a dict with keys "
               + _valid_config_keys() + " (env: key=value,key=value)",
               env="KILN_CONFIG", merge_env=True),
    # Kiln's own.
    OptionSpec("fallback", Choice(("eager", "error")), "eager",
               "what happens to nodes the daemon cannot run: 'eager' runs them in "
               "PyTorch (logged), 'error' raises instead",
               env="KILN_FALLBACK"),
    OptionSpec("min_partition_size", Number(int, 0), 1,
               "smallest partition (in compute nodes) worth sending to the daemon; "
               "smaller ones run in eager (0 sends partitions of views alone too, "
               "which eager runs without copying)",
               env="KILN_MIN_PARTITION_SIZE"),
    OptionSpec("dict_tag_guards", bool, True,
               "compile Kiln's frames with Dynamo's use_recursive_dict_tags_for_guards "
               "(a module's guards are skipped while its attribute dicts are unchanged; "
               "Kiln checks its weights per call itself); other frames keep the process's "
               "setting",
               env="KILN_DICT_TAG_GUARDS"),
    OptionSpec("timeout", Number(float, 0, exclusive=True), 60.0,
               "seconds one call may take in the daemon before it is an error",
               env="KILN_TIMEOUT"),
)

_SPECS = {spec.name: spec for spec in OPTIONS}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_switch(name: str) -> bool:
    """A client-wide switch of the environment (docs/options.md lists them):
    on unless set to 0, false, no or off."""
    return os.environ.get(name, "1").strip().lower() not in _FALSE - {""}


def _coerce(spec: OptionSpec, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(spec.type, Choice):
        text = value.strip() if isinstance(value, str) else value
        for choice in spec.type.values:
            if isinstance(text, str) and text.lower() == choice.lower():
                return choice
        raise ValueError(f"kiln option {spec.name!r} is {value!r}; valid values: "
                         f"{', '.join(map(repr, spec.type.values))}")
    if isinstance(spec.type, Number):
        number = value
        if isinstance(value, str):
            try:
                number = spec.type.kind(value.strip())
            except ValueError:
                number = None
        ok = (not isinstance(number, bool) and isinstance(number, (int, float))
              and (spec.type.kind is float or float(number).is_integer()))
        bound = spec.type.minimum
        if ok:
            ok = number > bound if spec.type.exclusive else number >= bound
        if not ok:
            kind = "an integer" if spec.type.kind is int else "a number"
            relation = ">" if spec.type.exclusive else ">="
            raise ValueError(f"kiln option {spec.name!r} is {value!r}; expected {kind} "
                             f"{relation} {bound:g}")
        return spec.type.kind(number)
    if spec.type is OpList:
        return OpList.parse(value, spec.name)
    if spec.type is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(f"kiln option {spec.name!r} expects a bool, got {value!r}")
    if spec.type is RuntimeConfig:
        return RuntimeConfig.parse(value)
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
            env = os.environ.get(spec.env) if spec.env else None
            if spec.name in options:
                values[spec.name] = _coerce(spec, options[spec.name])
                if spec.merge_env and env is not None:
                    values[spec.name] = _coerce(spec, env).updated(values[spec.name])
            elif env is not None:
                values[spec.name] = _coerce(spec, env)
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
