"""The engine's model views: the cached score view of a model and the rewritten copies rules ask for.

:func:`score_view` gives the ``ScoreView`` kernels evaluate, :func:`rewritten_model` the cached
``sk.rewrite(model, rule)`` (weights refreshed from the model on every call), :func:`fingerprint`
the part of every cache key that sees a model edited between calls (computed once within
:func:`one_call`), :func:`structure_fact` facts about a model's structure kept with that key,
and :func:`views_of` the ``views(rule)`` a kernel is built with. The caches are bounded and hold
their models weakly (:mod:`.cache`).
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .backend import active as active_backend
from .cache import KERNELS_PER_MODEL, ModelCache, value_key

if TYPE_CHECKING:
    import keras

    from ..model.scores import ScoreView

__all__ = [
    "rule_key",
    "rewritten_model",
    "score_view",
    "fingerprint",
    "one_call",
    "structure_fact",
    "views_of",
    "clear_views",
]

_views = ModelCache(KERNELS_PER_MODEL)
_rewritten = ModelCache(8)
_facts = ModelCache(KERNELS_PER_MODEL)
#: ``[model, its fingerprint or None]`` while :func:`one_call` runs for that model.
_pinned: contextvars.ContextVar[list | None] = contextvars.ContextVar("saliency_kit_pinned", default=None)


def clear_views() -> None:
    """Forget every score view and rewritten model."""
    _views.clear()
    _rewritten.clear()
    _facts.clear()


def rule_key(rule: Any) -> Any:
    return value_key(rule)


def rewritten_model(model: keras.Model, rule: Any) -> keras.Model:
    """``sk.rewrite(model, rule)``, cached per (model, rule value) while ``model`` lives.

    A rewrite holds a copy of the weights; they are refreshed from ``model`` on every call (one
    compiled copy), so training or editing ``model`` later is always seen. State outside the
    variables (a re-adapted ``Normalization``'s statistics) is part of the cache key
    (:func:`fingerprint`): a change gives a new copy, made by ``copy_state``.
    """
    if rule is None:
        return model

    def build() -> tuple[keras.Model, Callable[[], None]]:
        copy = backend.rewrite(model, rule)
        return copy, backend.weight_sync(model, copy)

    backend = active_backend()
    eagerly = backend.eagerly
    copy, sync = eagerly(lambda: _rewritten.get(model, (rule_key(rule), fingerprint(model)), build))
    eagerly(sync)
    return copy


def score_view(model: keras.Model, score: str = "logits", rule: Any = None) -> ScoreView:
    """The cached ``ScoreView`` of ``model`` (rewritten by ``rule``)."""
    backend = active_backend()
    eagerly = backend.eagerly
    target_model = rewritten_model(model, rule)
    key = (score, rule_key(rule), fingerprint(model))
    return eagerly(lambda: _views.get(model, key, lambda: backend.ScoreView(target_model, score)))


@contextlib.contextmanager
def one_call(model: keras.Model) -> Iterator[None]:
    """Within: :func:`fingerprint` of ``model`` is computed at most once. One explanation does not
    edit the model it explains, and its cache keys and views each ask for the fingerprint; only
    the first walks the model's layers."""
    token = _pinned.set([model, None])
    try:
        yield
    finally:
        _pinned.reset(token)


def structure_fact(model: keras.Model, name: Any, compute: Callable[[], Any]) -> Any:
    """``compute()``, kept per ``model`` (weakly) and :func:`fingerprint`: a fact about its
    structure that cannot change while the fingerprint does not (a functional model's inputs,
    which layer reads which), computed once instead of walking the model on every request. The
    value must not hold the model; an error is raised again at every call, never kept."""
    return _facts.get(model, (name, fingerprint(model)), compute)


def fingerprint(model: keras.Model) -> tuple:
    """A cheap fingerprint of ``model``: each layer's class, activation and non-variable state.

    Part of every cache key, so that editing a model between calls (the classic
    ``model.layers[-1].activation = keras.activations.linear``) is seen, not served stale; so is
    state a compiled kernel would capture as a constant: tensors a layer derives from its
    variables (``Normalization``'s mean and variance, recomputed by a second ``adapt``). A
    change of either gives new kernels and new model copies (made by ``copy_state``, which
    re-derives such state), instead of the values captured when the first ones were traced.
    """
    pinned = _pinned.get()
    if pinned is not None and pinned[0] is model:
        if pinned[1] is None:
            pinned[1] = _fingerprint(model)
        return pinned[1]
    return _fingerprint(model)


def _fingerprint(model: keras.Model) -> tuple:
    derived_state = active_backend().derived_state
    parts = []
    stack = [model]
    while stack:
        layer = stack.pop()
        activation = getattr(layer, "activation", None)
        parts.append(
            (
                type(layer).__name__,
                getattr(layer, "name", ""),
                None if activation is None else _activation_key(activation),
                derived_state(layer),
            )
        )
        stack.extend(reversed(getattr(layer, "layers", ()) or ()))
    return tuple(parts)


def _activation_key(activation: Any) -> Any:
    name = getattr(activation, "__qualname__", None) or getattr(activation, "__name__", None)
    if name and name != "<lambda>":
        return (getattr(activation, "__module__", None), name)
    return value_key(activation)  # a lambda, a partial, a layer used as an activation: by value


def views_of(model: keras.Model, score: str, rules_used: list) -> Callable[..., ScoreView]:
    """``views(rule)`` for a kernel, holding ``model`` weakly (the kernel lives in a cache keyed by it)."""
    model_ref = weakref.ref(model)

    def views(rule: Any = None) -> ScoreView:
        if rule is not None and not any(rule_key(rule) == rule_key(r) for r in rules_used):
            rules_used.append(rule)
        return score_view(model_ref(), score, rule)

    return views
