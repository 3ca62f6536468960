"""Method declarations: :class:`Option`, :class:`Method`, :func:`register` and the registry.

A method is one function of a context and its options, declared once::

    @register("gradient_power", summary="|∂s/∂x| to a power", options={"power": 2.0}, reduce="sum")
    def gradient_power(ctx, power):
        return tf.abs(ctx.gradients(ctx.inputs)) ** power      # [B, K, *input]

The declaration is the single source of truth about a method: its options (name, type, default,
help, choices) become command-line flags, its ``title`` and ``cam`` drive rendering, ``reduce``
makes its maps. This module imports neither TensorFlow nor Keras, so listing methods and
checking flags stays quick. Methods in installed distributions are found through the
entry-point group ``saliency_kit.methods``, loaded once, the first time the registry is read.
"""
from __future__ import annotations

import numbers
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = [
    "Option",
    "Method",
    "register",
    "unregister",
    "get",
    "names",
    "describe",
    "RESERVED_OPTION_NAMES",
    "ENTRY_POINT_GROUP",
    "REDUCTIONS",
]

#: Names the command line uses for its own flags; a method option may not be called so.
RESERVED_OPTION_NAMES = frozenset({
    "model", "weights", "unsafe", "method", "target", "targets", "out", "batch_size", "format",
    "shard", "resume", "debug", "sign", "cmap", "alpha", "clip_percentile", "score",
    "class_names", "ray", "workers", "gpus_per_worker", "batch_images", "mode", "help",
    "inputs", "image", "images", "input_dir", "input_keys",
})

#: How ``maps`` are made from attributions (see :func:`saliency_kit.methods.reduce_map`).
REDUCTIONS = ("abs_max", "sum", "mean", "none")

ENTRY_POINT_GROUP = "saliency_kit.methods"

_TYPES = (bool, int, float, str)


@dataclass(frozen=True)
class Option:
    """One option of a method.

    ``type`` (``int``, ``float``, ``str`` or ``bool``) is inferred from ``default`` when not
    given; a ``None`` default needs an explicit ``type``. ``choices`` restricts the value.
    ``array=True``: besides a value of ``type``, the method accepts an array (a baseline, a
    window per axis); such values are checked by the method itself. ``layer=True``: besides a
    value of ``type`` (a layer's name or path), a ``keras.layers.Layer`` object, which the
    method's ``prepare`` resolves (to its path). The command line offers the option as
    ``--name-with-dashes`` of ``type``.
    """

    name: str
    default: Any
    type: type | None = None
    help: str = ""
    choices: tuple | None = None
    array: bool = False
    layer: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"an option name must be a Python identifier; received {self.name!r}.")
        kind = self.type
        if kind is None:
            if self.default is None:
                raise ValueError(f"option {self.name!r} has default None: give its type (int, float, str or bool).")
            kind = next((t for t in _TYPES if type(self.default) is t), None)
            if kind is None:
                raise TypeError(
                    f"option {self.name!r}: cannot infer a type from default {self.default!r}; "
                    f"give type= one of int, float, str, bool; received {type(self.default).__name__}."
                )
            object.__setattr__(self, "type", kind)
        elif kind not in _TYPES:
            raise TypeError(f"option {self.name!r}: type must be int, float, str or bool; received {kind!r}.")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))

    @property
    def flag(self) -> str:
        """The command-line flag: ``steps`` → ``--steps``, ``max_sigma`` → ``--max-sigma``."""
        return "--" + self.name.replace("_", "-")

    def check(self, value, method: str = "") -> Any:
        """``value`` checked against the declaration (``TypeError``/``ValueError``), returned.

        ``None`` is accepted when it is the default. ints are accepted for floats.
        """
        where = f"{method}: " if method else ""
        if value is None and self.default is None:
            return value
        if self.array and not isinstance(value, (str, bool)) and not _is_scalar(value):
            return value  # an array: the method checks its shape and values
        if self.layer and _is_keras_layer(value):
            return value  # a layer object: the method's prepare finds it in the model
        kind = self.type
        if kind is bool:
            ok = isinstance(value, bool) or type(value).__name__ == "bool_"
        elif kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"
        elif kind is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"
        else:
            ok = isinstance(value, str)
        if not ok:
            extra = " or an array" if self.array else ""
            extra += " or a keras layer" if self.layer else ""
            extra += " or None" if self.default is None else ""
            raise TypeError(f"{where}option {self.name!r} must be {kind.__name__}{extra}; received {value!r}.")
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"{where}option {self.name!r} must be one of {', '.join(map(repr, self.choices))}; received {value!r}."
            )
        return value


def _is_keras_layer(value) -> bool:
    keras = sys.modules.get("keras")  # a layer object exists only once Keras is imported: never import it here
    return keras is not None and isinstance(value, keras.layers.Layer)


def _is_scalar(value) -> bool:
    return isinstance(value, (numbers.Number, str)) or (hasattr(value, "ndim") and getattr(value, "ndim") == 0)


@dataclass(frozen=True)
class Method:
    """A registered attribution method (see :func:`register`).

    ``compute(ctx, **options) -> attributions`` runs inside the engine's compiled function on a
    chunk of inputs; ``prepare(request, options) -> options`` (optional) checks option values
    against the request and resolves them (a default layer, a drawn seed) before any work.
    ``extends`` names an option whose value is another method whose options this one also
    takes (SmoothGrad's ``base``). ``cost(options)`` is the number of model evaluations per
    input and target, which the engine uses to size its chunks.
    """

    name: str
    summary: str
    compute: Callable
    options: tuple = ()
    reduce: str = "abs_max"
    title: str = ""
    cam: bool = False
    signed: bool = False
    prepare: Callable | None = None
    cost: Callable | None = None
    extends: str | None = None
    noisy: bool = False
    warn_zero: bool = True

    @property
    def defaults(self) -> dict:
        """``{option name: default}``."""
        return {option.name: option.default for option in self.options}

    def reduction(self, options: dict) -> str:
        """How maps are made with ``options``: an extending method reduces like its base, unless
        it declares ``reduce="none"`` (its attributions are maps already: XRAI)."""
        if self.extends is not None and self.reduce != "none":
            return get(options.get(self.extends, self.defaults[self.extends])).reduce
        return self.reduce

    def option(self, name: str) -> Option:
        for option in self.options:
            if option.name == name:
                return option
        raise KeyError(name)

    def accepted(self, given: dict | None = None) -> dict:
        """``{name: Option}`` of every option this method takes with ``given`` (an extended
        method's options included)."""
        accepted = {option.name: option for option in self.options}
        if self.extends is not None:
            base = (given or {}).get(self.extends, self.defaults[self.extends])
            if isinstance(base, str) and base in _registry():
                for option in get(base).options:
                    accepted.setdefault(option.name, option)
        return accepted

    def check_options(self, given: dict) -> dict:
        """``given`` checked against the declarations and completed with the defaults.

        Unknown names raise ``ValueError`` listing the allowed ones; wrong types ``TypeError``;
        values outside ``choices`` ``ValueError``.
        """
        accepted = self.accepted(given)
        unknown = sorted(set(given) - set(accepted))
        if unknown:
            raise ValueError(
                f"method {self.name!r} has no option {', '.join(map(repr, unknown))}; "
                f"its options are: {', '.join(sorted(accepted)) or 'none'}; received {', '.join(unknown)}."
            )
        values = {name: option.default for name, option in accepted.items()}
        for name, value in given.items():
            values[name] = accepted[name].check(value, self.name)
        return values


# ----------------------------------------------------------------------------------- registry
_REGISTRY: dict[str, Method] = {}
_option_types: dict[str, tuple[type, str]] = {}  # option name -> (type, first method declaring it)
_state = {"builtins": False, "plugins": False}
_BUILTIN_NAMES: set[str] = set()


def _as_options(options) -> tuple:
    if isinstance(options, dict):
        return tuple(Option(name, default) for name, default in options.items())
    result = []
    for option in options:
        if not isinstance(option, Option):
            raise TypeError(f"options must be a dict {{name: default}} or a list of Option; received {option!r}.")
        result.append(option)
    return tuple(result)


def register(
    name: str,
    *,
    summary: str,
    options=(),
    reduce: str = "abs_max",
    title: str | None = None,
    cam: bool = False,
    signed: bool = False,
    prepare: Callable | None = None,
    cost: Callable | None = None,
    extends: str | None = None,
    noisy: bool = False,
    warn_zero: bool | None = None,
):
    """Decorator registering ``fn(ctx, **options) -> attributions`` as method ``name``.

    Args:
        summary: one line for ``saliency methods``.
        options: ``{name: default}`` or a list of :class:`Option`.
        reduce: how maps are made: ``"abs_max"``, ``"sum"``, ``"mean"`` or ``"none"``
            (attributions are already maps, as for CAM methods).
        title: a short display title (default: the name, underscores as spaces, capitalised).
        cam: attributions are ``[B, K, H, W]`` maps on a layer.
        signed: the sign matters (rendered diverging by default).
        prepare, cost, extends, noisy, warn_zero: see :class:`Method`.

    Raises ``ValueError`` for a name registered twice, an option whose name the command line
    uses itself (:data:`RESERVED_OPTION_NAMES`), or an option declared by another method with
    another type.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a method name must be a Python identifier; received {name!r}.")
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(map(repr, REDUCTIONS))}; received {reduce!r}.")
    declared = _as_options(options)
    seen = [option.name for option in declared]
    if len(set(seen)) != len(seen):
        raise ValueError(f"method {name!r} declares an option twice; received {seen}.")

    def decorator(fn):
        if not callable(fn):
            raise TypeError(f"register({name!r}) decorates a function fn(ctx, **options); received {fn!r}.")
        _ensure_builtins()
        if name in _REGISTRY:
            raise ValueError(f"a method called {name!r} is already registered; received a second one ({fn!r}).")
        for option in declared:
            if option.name in RESERVED_OPTION_NAMES:
                raise ValueError(
                    f"method {name!r}: option {option.name!r} collides with the command line's own "
                    f"{option.flag}; choose another name; received {option.name!r}."
                )
            known = _option_types.get(option.name)
            if known is not None and known[0] is not option.type:
                raise ValueError(
                    f"method {name!r}: option {option.name!r} is declared {known[0].__name__} by method "
                    f"{known[1]!r}; one flag serves both, so give it that type; received {option.type.__name__}."
                )
        for option in declared:
            _option_types.setdefault(option.name, (option.type, name))
        _REGISTRY[name] = Method(
            name=name,
            summary=summary,
            compute=fn,
            options=declared,
            reduce=reduce,
            title=title or name.replace("_", " ").capitalize(),
            cam=bool(cam),
            signed=bool(signed),
            prepare=prepare,
            cost=cost,
            extends=extends,
            noisy=bool(noisy),
            warn_zero=(not cam) if warn_zero is None else bool(warn_zero),
        )
        return fn

    return decorator


def _ensure_builtins() -> None:
    """Import the built-in method modules once (they register in a fixed order)."""
    if not _state["builtins"]:
        _state["builtins"] = True
        from . import _builtin  # noqa: F401  (imports the built-in modules in order)

        _BUILTIN_NAMES.update(_builtin.ORDER)


def unregister(name: str) -> Method:
    """Remove the method registered as ``name`` from outside the package; returns its declaration.

    For tests and notebooks that register a method for a while (register it in a fixture,
    unregister it when done), so that the registry, ``names()`` and ``saliency methods`` are
    as before. ``ValueError`` for an unknown name or a built-in method.
    """
    _ensure_builtins()
    if name in _BUILTIN_NAMES:
        raise ValueError(f"built-in methods cannot be unregistered; received {name!r}.")
    if name not in _REGISTRY:
        raise ValueError(f"no method called {name!r} is registered; received {name!r}.")
    method = _REGISTRY.pop(name)
    for option in method.options:  # the flag's type is then set by another declaring method, if any
        if _option_types.get(option.name, (None, None))[1] == name:
            del _option_types[option.name]
            other = next((m for m in _REGISTRY.values() for o in m.options if o.name == option.name), None)
            if other is not None:
                _option_types[option.name] = (other.option(option.name).type, other.name)
    return method


def _load_plugins() -> None:
    """Import every module named in the entry-point group ``saliency_kit.methods``, once."""
    if _state["plugins"]:
        return
    _state["plugins"] = True
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        entry.load()  # importing the module registers its methods


def _registry() -> dict[str, Method]:
    _ensure_builtins()
    _load_plugins()
    if not _state.get("ordered") and _BUILTIN_NAMES <= set(_REGISTRY):
        # a method module imported first registers after the others: put the built-ins in order, once
        from ._builtin import ORDER

        ordered = {name: _REGISTRY[name] for name in ORDER}
        ordered.update((name, method) for name, method in _REGISTRY.items() if name not in ordered)
        _REGISTRY.clear()
        _REGISTRY.update(ordered)
        _state["ordered"] = True
    return _REGISTRY


def names() -> list[str]:
    """Every method name: the built-ins in a fixed order, then plugins in registration order."""
    return list(_registry())


def get(name: str) -> Method:
    """The method called ``name``; ``ValueError`` listing the known names otherwise."""
    registry = _registry()
    if not isinstance(name, str):
        raise TypeError(f"method must be a method name (str); received {name!r}.")
    try:
        return registry[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(registry), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown method{hint}; known methods: {', '.join(registry)}; received {name!r}.") from None


def describe() -> list[tuple[str, str]]:
    """``(name, one-line summary)`` for every method, for ``saliency methods``."""
    return [(method.name, method.summary) for method in _registry().values()]


def titles() -> dict[str, str]:
    """``{name: display title}`` of every method."""
    return {method.name: method.title for method in _registry().values()}


@dataclass(frozen=True)
class Request:
    """What :meth:`Method.prepare` sees before any work: the checked call.

    ``inputs`` ``[B, ...]`` NumPy in the model's input dtype; ``targets`` int ``[B, K]`` or
    ``None`` (not yet resolved); ``default_layer`` a model's configured CAM layer, if any;
    ``channel_axis`` the channel axis of one input (``-1``, or ``0`` for channels-first models).
    """

    model: object
    inputs: Any
    targets: Any = None
    score: str = "logits"
    batch_size: int = 32
    default_layer: str | None = None
    channel_axis: int = -1
    extra: dict = field(default_factory=dict)


def require_channels_last(request: Request, method: str, ranks=(4,), shape_text="image inputs [B, H, W, C]") -> None:
    """``ValueError`` unless the inputs are channels-last and of one of ``ranks`` (for methods that
    work on image axes: blurs, masks, regions); ``ranks=None`` checks the channel axis only."""
    if request.channel_axis == 0:
        raise ValueError(f"{method} works on channels-last inputs; received a channels-first model "
                         "(convert it, or use gradient, integrated_gradients or a CAM method).")
    if ranks is not None and request.inputs.ndim not in ranks:
        raise ValueError(f"{method} needs {shape_text}; received shape {request.inputs.shape}.")
