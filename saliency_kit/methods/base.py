"""Method declarations: :class:`Option`, :class:`Method`, :func:`register` and the registry.

A method is one function of a context and its options, declared once::

    @register("gradient_power", summary="|∂s/∂x| to a power", options={"power": 2.0}, reduce="sum")
    def gradient_power(ctx, power):
        return tf.abs(ctx.gradients(ctx.inputs)) ** power      # [B, K, *input]

The declaration is the single source of truth about a method: its options (name, type, default,
help, choices, range, seed: :class:`~saliency_kit.methods.option.Option`) become command-line
flags and are checked before any work, its ``title`` and ``cam`` drive rendering, ``reduce``
makes its maps. This module imports nothing from the package but :mod:`.option`, and neither
TensorFlow nor Keras, so listing methods and checking flags stays quick. The built-in methods
register when :mod:`saliency_kit.methods` imports their modules; methods in installed
distributions are found through the entry-point group ``saliency_kit.methods``, loaded once,
the first time the registry is read.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from importlib.metadata import entry_points
from typing import Any

from .option import Option

__all__ = [
    "Option",
    "Method",
    "Traits",
    "register",
    "unregister",
    "get",
    "names",
    "describe",
    "RESERVED_OPTION_NAMES",
    "ENTRY_POINT_GROUP",
    "REDUCTIONS",
    "Request",
    "builtins",
    "titles",
    "pixel_method",
]

#: Names the command line uses for its own flags; a method option may not be called so.
RESERVED_OPTION_NAMES = frozenset(
    {
        "model",
        "weights",
        "unsafe",
        "method",
        "target",
        "targets",
        "out",
        "batch_size",
        "format",
        "shard",
        "resume",
        "debug",
        "sign",
        "cmap",
        "alpha",
        "clip_percentile",
        "score",
        "class_names",
        "ray",
        "workers",
        "gpus_per_worker",
        "batch_images",
        "mode",
        "help",
        "inputs",
        "image",
        "images",
        "input_dir",
        "input_keys",
    }
)

#: How ``maps`` are made from attributions (see :func:`saliency_kit.methods.reduce_map`).
REDUCTIONS = ("abs_max", "sum", "mean", "none")

ENTRY_POINT_GROUP = "saliency_kit.methods"


@dataclass(frozen=True)
class Method:
    """A registered attribution method (see :func:`register`).

    ``compute(ctx, **options) -> attributions`` runs inside the engine's compiled function on a
    chunk of inputs; ``prepare(request, options) -> options`` checks option values against the
    request and resolves them before any work: a method registered with :func:`register` gets
    one that draws its seed (a :meth:`Option.seed` left ``None``), runs the method's own
    ``prepare`` (a default layer, a baseline's shape), then prepares the extended method.
    ``extends`` names an option whose value is another method whose options this one also
    takes (SmoothGrad's ``base``): a pixel method (not a CAM, extending no other). ``cost(options)``
    is the number of model evaluations per input and target, which the engine uses to size its
    chunks. ``spatial``: the method needs one input's own axes (windows, blurs, segments, a CAM
    layer's upsampling): when a model's several inputs are explained, it runs once per input, the
    others held at their values, instead of once on all of them together. ``layered``: its
    attributions are of an inner layer's output (conductance), named by ``attribute_to=``; it
    has no meaning without one. ``gradient_channel_weights``: a CAM weighting each channel of a
    layer by one number taken from the score's gradient over the whole layer (Grad-CAM, Grad-CAM++,
    guided Grad-CAM; not LayerCAM, whose weights are the gradient at each position); a target whose
    default score depends on the method reads it (a box target's default score). ``attention``: it
    reads the attention probabilities of a transformer's attention layers (attention rollout); a
    model without any is refused.
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
    warn_zero: bool = True
    spatial: bool = False
    layered: bool = False
    gradient_channel_weights: bool = False
    attention: bool = False

    @property
    def defaults(self) -> dict:
        """``{option name: default}``."""
        return {option.name: option.default for option in self.options}

    @property
    def builtin(self) -> bool:
        """Whether the method is one of the package's own (defined in ``saliency_kit.methods``)."""
        return getattr(self.compute, "__module__", "").startswith(_PACKAGE + ".")

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

    def seed_option(self, given: dict | None = None) -> str | None:
        """The name of the method's seed option (:meth:`Option.seed`) with ``given`` (an extended
        method's included), or ``None`` for a method that draws no random numbers."""
        return next((o.name for o in self.accepted(given).values() if o.kind == "seed"), None)

    @property
    def noisy(self) -> bool:
        """Whether the method (with its default options) draws random numbers under a seed."""
        return self.seed_option() is not None

    def check_options(self, given: dict) -> dict:
        """``given`` checked against the declarations and completed with the defaults.

        Unknown names raise ``ValueError`` listing the allowed ones; wrong types ``TypeError``;
        values outside ``choices`` or the declared range ``ValueError``.
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
_PACKAGE = __name__.rpartition(".")[0]  # saliency_kit.methods: the built-ins' modules live here
_REGISTRY: dict[str, Method] = {}
_option_types: dict[str, tuple[type, str]] = {}  # option name -> (type, first method declaring it)


def _as_options(options: Any) -> tuple:
    if isinstance(options, dict):
        return tuple(Option(name, default) for name, default in options.items())
    result = []
    for option in options:
        if not isinstance(option, Option):
            raise TypeError(f"options must be a dict {{name: default}} or a list of Option; received {option!r}.")
        result.append(option)
    return tuple(result)


@dataclass(frozen=True)
class Traits:
    """The rarely given keywords of :func:`register`, beyond ``summary``, ``options`` and ``reduce``.

    ``title``: a short display title (default: the name, underscores as spaces, capitalised);
    ``cam``: attributions are ``[B, K, H, W]`` maps on a layer; ``signed``: the sign matters
    (rendered diverging by default); ``prepare(request, options) -> options``: the method's own
    checks and resolutions (the registered :attr:`Method.prepare` also draws seeds and prepares
    the extended method); ``cost``, ``extends``, ``warn_zero`` (default: not ``cam``),
    ``spatial`` (default: ``cam``), ``layered``, ``gradient_channel_weights``, ``attention``: see
    :class:`Method`.
    """

    title: str | None = None
    cam: bool = False
    signed: bool = False
    prepare: Callable | None = None
    cost: Callable | None = None
    extends: str | None = None
    warn_zero: bool | None = None
    spatial: bool | None = None
    layered: bool = False
    gradient_channel_weights: bool = False
    attention: bool = False

    @classmethod
    def of(cls, name: str, keywords: dict) -> Traits:
        """The traits ``keywords`` give method ``name``; ``TypeError`` naming an unknown keyword."""
        known = [field.name for field in fields(cls)]
        unknown = sorted(set(keywords) - set(known))
        if unknown:
            raise TypeError(
                f"register({name!r}) takes no keyword {', '.join(map(repr, unknown))}; its keywords are "
                f"summary, options, reduce, {', '.join(known)}; received {', '.join(unknown)}."
            )
        return cls(**keywords)


def register(
    name: str, *, summary: str, options: Any = (), reduce: str = "abs_max", **traits: Any
) -> Callable[[Callable], Callable]:
    """Decorator registering ``fn(ctx, **options) -> attributions`` as method ``name``.

    Args:
        summary: one line for ``saliency methods``.
        options: ``{name: default}`` or a list of :class:`Option`.
        reduce: how maps are made: ``"abs_max"``, ``"sum"``, ``"mean"`` or ``"none"``
            (attributions are already maps, as for CAM methods).
        traits: the rarely given keywords ``title``, ``cam``, ``signed``, ``prepare``, ``cost``,
            ``extends``, ``warn_zero``, ``spatial``, ``layered``, ``gradient_channel_weights``,
            ``attention``: see :class:`Traits`.

    Raises ``ValueError`` for a name registered twice, an option whose name the command line
    uses itself (:data:`RESERVED_OPTION_NAMES`), or an option declared by another method with
    another type; ``TypeError`` for an unknown keyword.
    """
    given = Traits.of(name, traits)
    extends = given.extends
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a method name must be a Python identifier; received {name!r}.")
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {', '.join(map(repr, REDUCTIONS))}; received {reduce!r}.")
    declared = _as_options(options)
    seen = [option.name for option in declared]
    if len(set(seen)) != len(seen):
        raise ValueError(f"method {name!r} declares an option twice; received {seen}.")
    if extends is not None and extends not in seen:
        raise ValueError(
            f"method {name!r} extends the method named by option {extends!r}, which it does not "
            f"declare; received options {seen}."
        )

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"register({name!r}) decorates a function fn(ctx, **options); received {fn!r}.")
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
            _option_types.setdefault(option.name, (option.value_type, name))
        _REGISTRY[name] = Method(
            name=name,
            summary=summary,
            compute=fn,
            options=declared,
            reduce=reduce,
            title=given.title or name.replace("_", " ").capitalize(),
            cam=bool(given.cam),
            signed=bool(given.signed),
            prepare=_preparation(name, given.prepare),
            cost=given.cost,
            extends=extends,
            warn_zero=(not given.cam) if given.warn_zero is None else bool(given.warn_zero),
            spatial=bool(given.cam) if given.spatial is None else bool(given.spatial),
            layered=bool(given.layered),
            gradient_channel_weights=bool(given.gradient_channel_weights),
            attention=bool(given.attention),
        )
        return fn

    return decorator


def _preparation(name: str, own: Callable | None) -> Callable:
    """``prepare(request, options)`` of method ``name``: seeds drawn, the method's own ``own``,
    then the extended method's preparation on its own options."""

    def prepare(request: Request, options: dict) -> dict:
        method = get(name)
        accepted = method.accepted(options)
        values = {k: accepted[k].resolve(v) if k in accepted else v for k, v in options.items()}
        if own is not None:
            values = own(request, values)
        if method.extends is not None:
            base = pixel_method(values[method.extends], method.extends)
            if base.prepare is not None:
                names_of_base = {option.name for option in base.options}
                values.update(base.prepare(request, {k: v for k, v in values.items() if k in names_of_base}))
        return values

    return prepare


def pixel_method(name: str, option: str = "base") -> Method:
    """The method called ``name``, which must be a pixel method (not a CAM, extending no other),
    as an extending method's ``option`` names it; ``ValueError`` listing those otherwise."""
    method = get(name)
    if method.cam or method.extends is not None:
        usable = [m.name for m in _registry().values() if not m.cam and m.extends is None]
        raise ValueError(f"{option} must be a pixel method ({', '.join(usable)}); received {name!r}.")
    return method


def unregister(name: str) -> Method:
    """Remove the method registered as ``name`` from outside the package; returns its declaration.

    For tests and notebooks that register a method for a while (register it in a fixture,
    unregister it when done), so that the registry, ``names()`` and ``saliency methods`` are
    as before. ``ValueError`` for an unknown name or a built-in method.
    """
    if name not in _registry():
        raise ValueError(f"no method called {name!r} is registered; received {name!r}.")
    if _REGISTRY[name].builtin:
        raise ValueError(f"built-in methods cannot be unregistered; received {name!r}.")
    method = _REGISTRY.pop(name)
    for option in method.options:  # the flag's type is then set by another declaring method, if any
        if _option_types.get(option.name, (None, None))[1] == name:
            del _option_types[option.name]
            other = next((m for m in _REGISTRY.values() for o in m.options if o.name == option.name), None)
            if other is not None:
                _option_types[option.name] = (other.option(option.name).value_type, other.name)
    return method


@functools.cache
def _load_plugins() -> None:
    """Import every module named in the entry-point group ``saliency_kit.methods``, once."""

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        entry.load()  # importing the module registers its methods


def _registry() -> dict[str, Method]:
    _load_plugins()
    return _REGISTRY


def names() -> list[str]:
    """Every method name: the built-ins in the order their modules are imported by
    :mod:`saliency_kit.methods`, then plugins in registration order."""
    return list(_registry())


def builtins() -> list[str]:
    """The names of the package's own methods, in the order of :func:`names`."""
    return [name for name, method in _registry().items() if method.builtin]


def get(name: str) -> Method:
    """The method called ``name``; ``ValueError`` listing the known names otherwise."""
    registry = _registry()
    if not isinstance(name, str):
        raise TypeError(f"method must be a method name (str); received {name!r}.")
    try:
        return registry[name]
    except KeyError:
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

    model: Any
    inputs: Any
    targets: Any = None
    score: str = "logits"
    batch_size: int = 32
    default_layer: str | None = None
    channel_axis: int = -1
