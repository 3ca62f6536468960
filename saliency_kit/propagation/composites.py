"""Composites: which LRP rule each layer of a model gets.

A :class:`Composite` is an ordered mapping from a *key* to a rule; a layer takes the rule of the
first key it matches. Keys are a layer class (matched with ``isinstance``; a tuple of classes
also works), a layer name or path (``"block1/conv"`` inside nested models), or ``"first"`` (the
linear layers that read the model's input, through padding/reshaping only).

After the user's entries every composite falls back on the same base map (Zennit's
``layer_map_base``): ReLU-family activations and unmerged ``BatchNormalization`` → :class:`Pass`,
average pooling → ε-rule with ε = the composite's stabiliser (1e-6 by default). A ``Dense`` or convolution no
key matches is refused.

The named composites are Zennit's (``composite="epsilon_plus_flat"`` etc. in ``sk.explain``)::

    epsilon_plus               Dense: ε      Conv: z⁺     (Dense: Dense and EinsumDense)
    epsilon_plus_flat          Dense: ε      Conv: z⁺     first layer: flat
    epsilon_gamma_box          Dense: ε      Conv: γ      first conv: ZBox(low, high)
    epsilon_alpha2_beta1       Dense: ε      Conv: α2β1
    epsilon_alpha2_beta1_flat  Dense: ε      Conv: α2β1   first layer: flat
    epsilon / gamma / alpha1_beta0: one rule for every Dense and convolution

A composite of your own is one ``@register("name")`` on a class or factory here (or anywhere, for a
composite of your own); ``names()`` lists them. This module imports neither TensorFlow nor Keras:
the rules and layer classes are imported when a composite is built, so reading the names (the
``lrp`` method's choices) stays cheap.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "Composite",
    "EpsilonAlpha2Beta1",
    "EpsilonAlpha2Beta1Flat",
    "EpsilonGammaBox",
    "EpsilonPlus",
    "EpsilonPlusFlat",
    "FirstOf",
    "get",
    "names",
    "register",
    "LRPRewrite",
]

AVERAGE_POOLING_EPSILON = 1e-6

_REGISTRY: dict[str, Callable] = {}


def register(name: str, factory: Callable | None = None) -> Callable:
    """Register ``factory(**options) -> Composite`` under ``name`` (lower snake case); without
    ``factory``, a decorator: ``@register("my_composite")`` on a class or a function."""
    if factory is None:
        return lambda factory: register(name, factory)
    if name in _REGISTRY:
        raise ValueError(f"a composite named {name!r} is already registered; received {factory!r}.")
    _REGISTRY[name] = factory
    return factory


def _keras_kinds() -> Any:
    """Layer classes the named composites speak of (imported late: keras is heavy)."""
    import keras

    dense = (keras.layers.Dense, keras.layers.EinsumDense)
    convolution = (
        keras.layers.Conv1D,
        keras.layers.Conv2D,
        keras.layers.Conv3D,
        keras.layers.DepthwiseConv1D,
        keras.layers.DepthwiseConv2D,
        keras.layers.SeparableConv1D,
        keras.layers.SeparableConv2D,
    )
    return dense, convolution


class Composite:
    """An ordered mapping ``{key: rule}``; the first key a layer matches gives its rule.

    Args:
        rules: a ``dict`` or a sequence of ``(key, rule)`` pairs. ``key``: a layer class or tuple
            of classes, a layer name or path, or ``"first"``; ``rule``: an LRP rule instance
            (:class:`~saliency_kit.rules.Epsilon`, ...).
        pooling_stabilizer: the ε of the ε-rule that average pooling gets when no key matches it.
    """

    def __init__(self, rules: Any, *, pooling_stabilizer: float = AVERAGE_POOLING_EPSILON) -> None:
        self.pooling_stabilizer = float(pooling_stabilizer)
        from .core import LinearRule
        from .lrp_rules import Pass

        items = list(rules.items()) if isinstance(rules, dict) else list(rules)
        for entry in items:
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise TypeError(f"Composite rules must be (key, rule) pairs; received {entry!r}.")
            key, rule = entry
            if not (
                isinstance(key, str)
                or isinstance(key, type)
                or (isinstance(key, tuple) and all(isinstance(k, type) for k in key))
            ):
                raise TypeError(
                    "a Composite key must be a layer class (or tuple of classes), a layer name/path "
                    f"or 'first'; received {key!r}."
                )
            if not isinstance(rule, (LinearRule, Pass, FirstOf)):
                raise TypeError(
                    "a Composite rule must be an LRP rule instance such as sk.rules.Epsilon(); "
                    f"received {rule!r} for key {key!r}."
                )
        self.rules = items

    def rule_for(self, layer: Any, path: str, first: bool) -> Any:
        """The rule of the first matching key, or ``None``."""
        for key, rule in self.rules:
            if isinstance(key, str):
                if key == "first" and first and isinstance(rule, FirstOf):
                    if isinstance(layer, rule.kinds):
                        return rule.rule
                elif (key == "first" and first) or key == path or key == getattr(layer, "name", None):
                    return rule
            elif isinstance(layer, key):
                return rule
        return None

    def rewrite_model(self, model: Any) -> Any:
        """The LRP rewrite of ``model`` with this composite (:func:`~saliency_kit.propagation.lrp.rewrite_lrp`)."""
        from .lrp import rewrite_lrp

        return rewrite_lrp(model, self)

    def __repr__(self) -> str:
        entries = ", ".join(f"{getattr(k, '__name__', k)!s}: {r!r}" for k, r in self.rules)
        return f"{type(self).__name__}({{{entries}}})"


class _Named(Composite):
    """A named composite: ``first`` rule (or None), then conv and dense rules."""

    def __init__(
        self, conv_rule: Any, dense_rule: Any, first_rule: Any = None, stabilizer: Any = AVERAGE_POOLING_EPSILON
    ) -> None:
        dense, convolution = _keras_kinds()
        entries = []
        if first_rule is not None:
            entries.append(("first", first_rule))
        entries += [(convolution, conv_rule), (dense, dense_rule)]
        super().__init__(entries, pooling_stabilizer=stabilizer)


@register("epsilon_plus")
class EpsilonPlus(_Named):
    """ε for dense layers, z⁺ for convolutions."""

    def __init__(self, epsilon: float = 1e-6, stabilizer: float = 1e-6) -> None:
        from . import lrp_rules

        super().__init__(lrp_rules.ZPlus(stabilizer), lrp_rules.Epsilon(epsilon), stabilizer=stabilizer)


@register("epsilon_plus_flat")
class EpsilonPlusFlat(_Named):
    """ε for dense layers, z⁺ for convolutions, flat for the first linear layer."""

    def __init__(self, epsilon: float = 1e-6, stabilizer: float = 1e-6) -> None:
        from . import lrp_rules

        super().__init__(
            lrp_rules.ZPlus(stabilizer), lrp_rules.Epsilon(epsilon), lrp_rules.Flat(stabilizer), stabilizer
        )


@register("epsilon_gamma_box")
class EpsilonGammaBox(_Named):
    """ε for dense layers, γ for convolutions, ZBox(low, high) for the first convolution."""

    def __init__(
        self, low: Any, high: Any, epsilon: float = 1e-6, gamma: float = 0.25, stabilizer: float = 1e-6
    ) -> None:
        from . import lrp_rules

        dense, convolution = _keras_kinds()
        Composite.__init__(
            self,
            [
                ("first", FirstOf(convolution, lrp_rules.ZBox(low, high, stabilizer))),
                (convolution, lrp_rules.Gamma(gamma, stabilizer)),
                (dense, lrp_rules.Epsilon(epsilon)),
            ],
            pooling_stabilizer=stabilizer,
        )


class FirstOf:
    """For the key ``"first"``: ``rule`` only where the first layer is one of ``kinds`` (Zennit's
    ``EpsilonGammaBox`` gives ZBox to a first *convolution* only)."""

    def __init__(self, kinds: Any, rule: Any) -> None:
        self.kinds, self.rule = kinds, rule

    def __repr__(self) -> str:
        return repr(self.rule)


@register("epsilon_alpha2_beta1")
class EpsilonAlpha2Beta1(_Named):
    """ε for dense layers, α2β1 for convolutions."""

    def __init__(self, epsilon: float = 1e-6, stabilizer: float = 1e-6) -> None:
        from . import lrp_rules

        super().__init__(lrp_rules.AlphaBeta(2.0, 1.0, stabilizer), lrp_rules.Epsilon(epsilon), stabilizer=stabilizer)


@register("epsilon_alpha2_beta1_flat")
class EpsilonAlpha2Beta1Flat(_Named):
    """ε for dense layers, α2β1 for convolutions, flat for the first linear layer."""

    def __init__(self, epsilon: float = 1e-6, stabilizer: float = 1e-6) -> None:
        from . import lrp_rules

        super().__init__(
            lrp_rules.AlphaBeta(2.0, 1.0, stabilizer),
            lrp_rules.Epsilon(epsilon),
            lrp_rules.Flat(stabilizer),
            stabilizer,
        )


def _one_rule(make_rule: Callable) -> Callable:
    def build(pooling_stabilizer: float = AVERAGE_POOLING_EPSILON, **options: Any) -> Any:
        rule = make_rule(**options)
        dense, convolution = _keras_kinds()
        return Composite([(dense + convolution, rule)], pooling_stabilizer=pooling_stabilizer)

    build.rule_factory = make_rule  # type: ignore[attr-defined]  # read back by resolve's option check
    return build


@register("epsilon")
@_one_rule
def _epsilon(epsilon: float = 1e-6) -> Any:
    from .lrp_rules import Epsilon

    return Epsilon(epsilon)


@register("gamma")
@_one_rule
def _gamma(gamma: float = 0.25, stabilizer: float = 1e-6) -> Any:
    from .lrp_rules import Gamma

    return Gamma(gamma, stabilizer)


@register("alpha1_beta0")
@_one_rule
def _alpha1_beta0(stabilizer: float = 1e-6) -> Any:
    from .lrp_rules import AlphaBeta

    return AlphaBeta(1.0, 0.0, stabilizer)


def names() -> list[str]:
    """The registered composite names, in registration order."""
    return list(_REGISTRY)


def get(composite: Any, **options: Any) -> Composite:
    """A :class:`Composite` from a name (built with those of ``options`` its factory takes) or
    an instance (returned as it is; ``options`` are then ignored).

    ``options`` with the value ``None`` are left at the factory's default; ``epsilon_gamma_box``
    requires ``low`` and ``high``.
    """
    if isinstance(composite, Composite):
        return composite
    if not isinstance(composite, str):
        raise TypeError(f"composite must be a name or a Composite; received {composite!r}.")
    if composite not in _REGISTRY:
        raise ValueError(f"unknown composite; known: {', '.join(_REGISTRY)}; received {composite!r}.")
    factory = _REGISTRY[composite]
    accepted: Mapping[str, inspect.Parameter] = inspect.signature(factory).parameters
    if hasattr(factory, "rule_factory"):  # one rule everywhere: that rule's own options
        own = dict(inspect.signature(factory.rule_factory).parameters)
        if "stabilizer" in options and options["stabilizer"] is not None:
            options = {**options, "pooling_stabilizer": options["stabilizer"]}
        own["pooling_stabilizer"] = inspect.signature(factory).parameters["pooling_stabilizer"]
        accepted = own
    given = {k: v for k, v in options.items() if v is not None and k in accepted}
    missing = [
        k
        for k, p in accepted.items()
        if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD and k not in given
    ]
    if missing:
        raise ValueError(
            f"composite {composite!r} needs {' and '.join(missing)} (the input bounds in the "
            f"model's input space, e.g. low=-1.0, high=1.0); received {options!r}."
        )
    return factory(**given)


@dataclasses.dataclass(frozen=True)
class LRPRewrite:
    """The ``rule`` that makes ``sk.rewrite`` and the engine build LRP models
    (:func:`~saliency_kit.propagation.lrp.rewrite_lrp`), keyed by value: a composite name (or a
    :class:`Composite`), its options as sorted ``(name, value)`` pairs, and whether the input
    gradient is the relevance itself."""

    composite: object = "epsilon_plus_flat"
    options: tuple = ()
    input_relevance: bool = False

    def rewrite_model(self, model: Any) -> Any:
        from .lrp import rewrite_lrp

        return rewrite_lrp(model, get(self.composite, **dict(self.options)), input_relevance=self.input_relevance)
