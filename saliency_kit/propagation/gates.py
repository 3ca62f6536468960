"""The gates: ``custom_gradient`` functions that leave a forward value unchanged and replace its
gradient by a propagation rule's.

* LRP: :func:`rule_gate` (a linear part with a :class:`~saliency_kit.propagation.core.LinearRule`),
  :func:`pass_gate` (an element-wise activation with ``Pass``) and :func:`relevance_gate` (where
  an explained value is read: the gradient turned into relevance, ``x ⊙ dx``).
* DeepLIFT: :func:`rescale_gate`, :func:`maxpool_gate` and :func:`midpoint_gate` (a map that mixes
  its inputs: softmax, layer normalisation), whose rows are inputs and references
  interleaved in pairs (:func:`halves` and :func:`interleave` read and write that layout), or,
  within a :class:`SharedReference`, the inputs alone, read against one reference row that ran
  through the model before them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any

from keras import ops

from .autodiff import custom_gradient, divide_no_nan, fused, identity, linearized, pullback
from .core import LinearPart, LinearRule

__all__ = [
    "DELTA_EPSILON",
    "halves",
    "interleave",
    "SharedReference",
    "maxpool_gate",
    "midpoint_gate",
    "pass_gate",
    "relevance_gate",
    "rescale_gate",
    "rule_gate",
    "shared_reference",
]

DELTA_EPSILON = 1e-7  # DeepLIFT: below this |x − x₀| the plain derivative is the multiplier


def rule_gate(rule: LinearRule, part: LinearPart, x: Any, z: Any, to_relevance: bool, nonnegative: bool = False) -> Any:
    """``z`` unchanged; its gradient w.r.t. ``x`` replaced by ``rule``'s (in gradient form, or
    the relevance itself when ``to_relevance``); ``nonnegative``: ``x >= 0`` by construction."""

    @custom_gradient
    def gate(x: Any, z: Any) -> Any:
        def backward(dz: Any) -> Any:
            coefficients, constant = rule.backward(part, x, z, z * dz, nonnegative)
            if to_relevance:
                dx = x * coefficients + (constant if constant is not None else 0)
            else:
                dx = coefficients if constant is None else coefficients + divide_no_nan(constant, x)
            return dx, None

        return identity(z), backward

    return gate(x, ops.stop_gradient(z))  # z's own path gets no gradient: none flows back along it


def pass_gate(rule: Any, x: Any, y: Any, to_relevance: bool, family: Any = None) -> Any:
    """``y`` unchanged; relevance passes from ``y`` to ``x`` by ``rule.gradient(x, y, dy, family)``
    (in gradient form; ``family``: the ReLU family ``y = f(x)`` is, when it is one), or unchanged
    when ``to_relevance``."""

    @custom_gradient
    def gate(x: Any, y: Any) -> Any:
        def backward(dy: Any) -> Any:
            if to_relevance:
                return dy, None
            return rule.gradient(x, y, dy, family), None

        return identity(y), backward

    return gate(x, ops.stop_gradient(y))  # y's own path gets no gradient: none flows back along it


@custom_gradient
def relevance_gate(x: Any) -> Any:
    """``x`` unchanged; backward ``x ⊙ dx``: the relevance of ``x`` from its gradient-form
    cotangent (where an LRP copy reads an explained value, so that its input gradient *is* the
    relevance)."""
    return identity(x), lambda dx: x * dx


_REFERENCE: contextvars.ContextVar[SharedReference | None] = contextvars.ContextVar(
    "saliency_kit_shared_reference", default=None
)


class SharedReference:
    """One reference row shared by every input, run through the rewritten model on its own.

    Within :meth:`record` (the reference's pass, one row) each DeepLIFT gate saves the values it
    sees; within :meth:`replay` (the inputs' pass, ``n`` rows) it reads them back, by the layer
    that called it and the order of its calls, and its backward reads every row against them.
    The reference so costs one row forward and no backward, and the inputs' convolutions run on
    ``n`` rows, not ``n + 1`` (which on a few cores costs a whole extra share of the batch).
    """

    def __init__(self) -> None:
        self._saved: dict = {}  # calling layer -> the values its calls saw, in order; lives one trace
        self._read: dict = {}
        self._replaying = False

    @property
    def replaying(self) -> bool:
        """Whether the inputs' pass is running (else the reference's)."""
        return self._replaying

    @contextlib.contextmanager
    def record(self) -> Iterator[None]:
        """Within: the gates save the reference's values (the model runs on the reference row)."""
        token = _REFERENCE.set(self)
        try:
            yield
        finally:
            _REFERENCE.reset(token)

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        """Within: the gates read the reference's values back (the model runs on the inputs).
        ``RuntimeError`` if the two passes did not call the same gates the same number of times."""
        self._replaying = True
        token = _REFERENCE.set(self)
        try:
            yield
        finally:
            _REFERENCE.reset(token)
        unread = {site: len(values) - self._read.get(site, 0) for site, values in self._saved.items()}
        if any(unread.values()):
            raise RuntimeError(
                "the rewritten model ran differently on the reference than on the inputs: "
                f"{', '.join(_named(site) for site, left in unread.items() if left)} "
                "saw the reference more often; a shared reference needs the same layers called in the same order."
            )

    def exchange(self, site: Any, *values: Any) -> Any:
        """Recording: save ``values`` (one row each) for ``site`` and return ``None``. Replaying:
        the reference's values at this call of ``site`` (``[1, ...]``, broadcasting against ``values``)."""
        calls = self._saved.setdefault(site, [])
        if not self._replaying:
            calls.append(tuple(ops.stop_gradient(v) for v in values))
            return None
        index = self._read.get(site, 0)
        if index >= len(calls):
            raise RuntimeError(
                f"the rewritten model called {_named(site)} on the inputs more often than on "
                "the reference; a shared reference needs the same layers called in the same order."
            )
        self._read[site] = index + 1
        saved = calls[index]
        for value, reference in zip(values, saved):
            if value is not None and value.shape[1:] != reference.shape[1:]:
                raise RuntimeError(
                    f"{_named(site)} saw {tuple(reference.shape[1:])} per row on the reference "
                    f"and {tuple(value.shape[1:])} on the inputs; a shared reference needs the same shapes."
                )
        return saved


def _named(site: Any) -> str:
    return repr(getattr(site, "name", site))


def shared_reference() -> SharedReference | None:
    """The :class:`SharedReference` the gates are traced within, or ``None`` (rows interleaved)."""
    return _REFERENCE.get()


def halves(t: Any) -> Any:
    """``(inputs, baselines)``: the even and the odd rows of ``t`` (rows interleaved in pairs)."""
    pairs = ops.reshape(t, (-1, 2, *ops.shape(t)[1:]))
    return pairs[:, 0], pairs[:, 1]


def interleave(first: Any, second: Any) -> Any:
    """Rows ``[first_0, second_0, first_1, ...]``."""
    return ops.reshape(ops.stack([first, second], 1), (-1, *ops.shape(first)[1:]))


def rescale_gate(family: Any, x: Any, site: Any = None) -> Any:
    """``y = family.forward(x)``; backward: DeepLIFT's Rescale multiplier ``(y − y₀) / (x − x₀)``
    (the plain derivative where ``|x − x₀| ≤ 1e-7``).

    Rows interleaved (inputs and baselines in pairs): the multiplier in the input rows, zero in
    the baseline rows. Within a :class:`SharedReference` (``site``: the calling layer): nothing on
    the reference's pass, and on the inputs' every row read against the reference's values.
    """
    shared = shared_reference()
    if shared is not None:
        if not shared.replaying:
            y = family.forward(x)
            shared.exchange(site, x, y)
            return y
        x0, y0 = shared.exchange(site, x, None)

        @custom_gradient
        def against_reference(x: Any) -> Any:
            return family.forward(x), lambda dy: _rescaled(family, x, x0, y0, dy)

        return against_reference(x)

    @custom_gradient
    def gate(x: Any) -> Any:
        y = family.forward(x)

        def backward(dy: Any) -> Any:
            x1, x0 = halves(x)
            _, y0 = halves(y)
            dy1, _ = halves(dy)
            return interleave(_rescaled(family, x1, x0, y0, dy1), ops.zeros_like(x0))

        return y, backward

    return gate(x)


def _rescaled(family: Any, x: Any, x0: Any, y0: Any, dy: Any) -> Any:
    """``dy · (y − y₀) / (x − x₀)``, or ``dy · f'(x)`` (``family.backward``) where ``|x − x₀| ≤ 1e-7``;
    ``y = f(x)``, ``y₀ = f(x₀)``."""
    return _rescale_kernel(family)(x, x0, y0, dy)


@functools.lru_cache(maxsize=64)
def _rescale_kernel(family: Any) -> Any:
    """:func:`_rescaled` for one ReLU family, compiled by XLA: its element-wise steps fused into
    one pass that reads ``x`` and ``dy`` (``y`` recomputed, exactly, from ``x``; ``x₀``, ``y₀`` one
    row when shared). Run apart, each step reads and writes the whole tensor, and together they
    cost a quarter of a ResNet's forward and backward."""

    @fused
    def rescaled(x: Any, x0: Any, y0: Any, dy: Any) -> Any:
        delta_x = x - x0
        apart = ops.abs(delta_x) > DELTA_EPSILON
        multiplier = (family.forward(x) - y0) / ops.where(apart, delta_x, ops.ones((), delta_x.dtype))
        return ops.where(apart, dy * multiplier, family.backward(x, dy))

    return rescaled


def maxpool_gate(pool: Any, x: Any, y: Any, site: Any = None) -> Any:
    """``y = pool(x)`` unchanged (rows as for :func:`rescale_gate`); backward: Captum's
    max-pooling multiplier for the input rows."""
    shared = shared_reference()
    if shared is not None:
        reference = shared.exchange(site, x, y)
        if reference is None:
            return y
        x0, y0 = reference

        @custom_gradient
        def against_reference(x: Any, y: Any) -> Any:
            return identity(y), lambda dy: (_pooled(pool, x, x0, y, y0, dy), None)

        return against_reference(x, ops.stop_gradient(y))

    @custom_gradient
    def gate(x: Any, y: Any) -> Any:
        def backward(dy: Any) -> Any:
            x1, x0 = halves(x)
            y1, y0 = halves(y)
            dy1, _ = halves(dy)
            return interleave(_pooled(pool, x1, x0, y1, y0, dy1), ops.zeros_like(x0)), None

        return identity(y), backward

    return gate(x, ops.stop_gradient(y))  # y's own path gets no gradient: none flows back along it


def _pooled(pool: Any, x: Any, x0: Any, y: Any, y0: Any, dy: Any) -> Any:
    """The max-pooling multiplier: of ``Δy``, ``max(y, y₀) − y₀`` goes to the winner in ``x`` and
    ``y − max(y, y₀)`` to the winner in ``x₀``, each input's share divided by its ``x − x₀``
    (``x₀``, ``y₀``: one row each or one per row)."""
    x0 = ops.broadcast_to(x0, ops.shape(x))  # each row's share goes to the reference's winners
    top = ops.maximum(y, y0)
    _, pull = pullback(pool, x)
    _, pull0 = pullback(pool, x0)
    shares = pull(dy * (top - y0)) + pull0(dy * (y - top))
    plain = pull(dy)
    delta_x = x - x0
    return ops.where(
        ops.abs(delta_x) > DELTA_EPSILON, shares / ops.where(delta_x == 0, ops.ones_like(delta_x), delta_x), plain
    )


def midpoint_gate(function: Any, x: Any, site: Any = None, multipliers: Any = None) -> Any:
    """``y = function(x)`` (a map that mixes its inputs, same rows in and out); backward:
    DeepLIFT's multipliers (``multipliers(x, x0, y, y0, dy)`` when given, an exact split of the
    map's own; else) by the midpoint Jacobian rescaled per output,

        ``m_x = J_midᵀ (m_y ⊙ Δy / (J_mid Δx))``, ``J_mid`` the Jacobian of ``function`` at
        ``(x + x₀)/2``, ``Δx = x − x₀``, ``Δy = y − y₀``,

    so that ``Σ Δx ⊙ m_x = Σ Δy ⊙ m_y`` exactly (summation to delta through the map); the plain
    ``J_midᵀ m_y`` for an output where ``|J_mid Δx| ≤ 1e-7``. For an element-wise map this is
    Rescale, ``Δy / Δx``; for a linear one, its gradient. Rows as for :func:`rescale_gate`
    (``site``: the calling layer, within a :class:`SharedReference`).
    """
    if multipliers is None:
        multipliers = functools.partial(_midpoint_multipliers, function)
    shared = shared_reference()
    if shared is not None:
        if not shared.replaying:
            y = function(x)
            shared.exchange(site, x, y)
            return y
        x0, y0 = shared.exchange(site, x, None)

        @custom_gradient
        def against_reference(x: Any) -> Any:
            y = function(x)
            return y, lambda dy: multipliers(x, x0, y, y0, dy)

        return against_reference(x)

    @custom_gradient
    def gate(x: Any) -> Any:
        y = function(x)

        def backward(dy: Any) -> Any:
            # in the full layout (each reference beside its input, the input rows' cotangent, zero
            # in the reference rows, whose Δx is zero): ``function`` may read tensors of all rows (a mask)
            _, x0 = halves(x)
            _, y0 = halves(y)
            dy1, _ = halves(dy)
            return multipliers(x, interleave(x0, x0), y, interleave(y0, y0), interleave(dy1, ops.zeros_like(dy1)))

        return y, backward

    return gate(x)


def _midpoint_multipliers(function: Any, x: Any, x0: Any, y: Any, y0: Any, dy: Any) -> Any:
    """``J_midᵀ (dy ⊙ Δy / (J_mid Δx))`` (see :func:`midpoint_gate`); ``x₀``, ``y₀``: one row or
    one per row. One forward-mode product (``J_mid Δx``) and one reverse-mode product."""
    delta_x = x - x0
    midpoint = x0 + delta_x / 2
    _, linear, pull = linearized(function, midpoint, delta_x)
    apart = ops.abs(linear) > DELTA_EPSILON
    ratio = (y - y0) / ops.where(apart, linear, ops.ones((), linear.dtype))
    cotangent = ops.where(apart, dy * ratio, dy)
    return pull(ops.stop_gradient(cotangent))
