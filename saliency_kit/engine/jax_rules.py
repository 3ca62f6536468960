"""Op-level backward rules on JAX: every ReLU-family operation a traced function runs
differentiates by a rule.

:func:`with_rule` traces ``fn`` to a jaxpr and interprets it, replacing each ReLU-family operation
by a ``jax.custom_vjp`` function whose forward pass is that operation itself (bit-identical values)
and whose backward pass is ``rule.grad(x, y, dy)``, the rule bound to the operation's activation::

    wrapped, report = with_rule(lambda values, x: model.stateless_call(values, [], x)[0], "guided")
    grad = jax.jit(jax.grad(lambda values, x: wrapped(values, x)[0, 3].sum(), argnums=1))

What Keras 3 runs on JAX, and what is taken over (``x`` the activation's input):

- ``custom_jvp_call[name=relu]`` and ``custom_jvp_call[name=relu6]``: ``jax.nn.relu``/``relu6``,
  which ``keras.ops.relu``/``relu6``, ``keras.activations.relu``/``relu6``, fused ``activation="relu"``,
  ``keras.layers.ReLU()``/``ReLU(max_value=6)`` and ``Activation("relu")`` all lower to;
- ``jit[name=leaky_relu](x, slope)``: ``jax.nn.leaky_relu`` (``LeakyReLU``, ``ReLU(negative_slope=a)``);
- activations of several operations, taken over as one: ``relu(x)`` then ``jit[name=clip](·, 0, m)``
  or ``min(·, m)`` (``max_value`` other than 6); ``jit[name=_where](gt(x, t), x, 0)`` (a ``threshold``,
  then possibly clipped); and Keras' leaky composite ``pos(x) - a · relu(-x [+ t])`` with ``pos`` one
  of the above (``negative_slope`` together with ``max_value`` or ``threshold``).

Nested programs are rewritten too: ``jit`` calls, the bodies of ``scan``/``while`` (recurrent layers)
and the branches of ``cond`` are rebuilt from transformed sub-jaxprs. A ReLU inside another
``custom_jvp``/``custom_vjp`` function keeps that function's own derivative: it is reported
(``report.unreached``), as is an activation whose parameters are not constants
(``report.unsupported``). Nothing global changes: the original ``fn`` and its gradients stay plain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.extend.core as jcore
import numpy as np

from ..rules import ModifiedBackprop, as_rule
from ..rules.coverage import FamilyCoverage
from .jax_relu_patterns import Activation, Graph, find_activations, function_name, holds_relu

__all__ = ["RuleReport", "with_rule"]

_CUSTOM_DERIVATIVES = ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin")


@dataclasses.dataclass
class RuleReport(FamilyCoverage):
    """What :func:`with_rule`'s wrapped function took over, filled in each time it is traced: a
    :class:`~saliency_kit.rules.coverage.RuleCoverage` whose ``ops`` are readable lines, e.g.
    ``"relu at dense"``, ``"leaky_relu(negative_slope=0.2) at leaky_re_lu"``, ``"relu at
    simple_rnn (in scan)"``, ``families`` the :class:`~saliency_kit.rules.ReluFamily` of each in
    the same order, and whose ``unreached`` are functions with their own derivative
    (``custom_jvp``/``custom_vjp``)."""

    WHERE: ClassVar[str] = "not inside a function with its own custom derivative"


def with_rule(fn: Callable, rule: Any) -> tuple[Callable, RuleReport]:
    """``(wrapped, report)``: ``wrapped(*args)`` computes ``fn(*args)`` exactly (bit-identical), and
    its derivatives (``jax.vjp``, ``jax.grad``, inside ``jax.jit`` too) apply ``rule`` at every
    ReLU-family operation ``fn`` runs.

    Args:
        fn: a pure JAX-traceable function of pytree arguments (arrays of any shape), returning a
            pytree of arrays.
        rule: ``"guided"``, ``"deconv"`` or a :class:`~saliency_kit.ModifiedBackprop` instance.

    Returns:
        ``wrapped`` (same signature and outputs as ``fn``) and its :class:`RuleReport`, refilled
        each time ``wrapped`` is traced (an ``fn`` with no ReLU-family operation leaves it empty).
    """
    rule = as_rule(rule)
    report = RuleReport(rule)

    def wrapped(*args: Any) -> Any:
        report.clear()
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        flat = _evaluate(closed.jaxpr, closed.consts, jax.tree.leaves(args), _State(rule, report), "")
        return jax.tree.unflatten(jax.tree.structure(out_shape), flat)

    return wrapped, report


@dataclasses.dataclass
class _State:
    rule: ModifiedBackprop
    report: RuleReport


# -- interpreting ------------------------------------------------------------------------------------
def _bind(eqn: Any, values: list) -> list:
    with eqn.ctx.manager:
        out = eqn.primitive.bind(*values, **eqn.primitive.get_bind_params(eqn.params))
    return list(out) if eqn.primitive.multiple_results else [out]


def _place(eqn: Any, where: str) -> str:
    stack = str(eqn.source_info.name_stack)
    place = "/".join(p for p in (where, stack) if p)
    return place or "top level"


def _evaluate(jaxpr: Any, consts: Any, args: list, state: _State, where: str) -> list:
    graph = Graph(jaxpr, consts)
    found = find_activations(graph, state.report.unsupported, state.report.plain, where)
    inside = {i for activation in found.values() for i in activation.eqns[:-1]}
    env: dict = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(atom: Any) -> Any:
        return atom.val if isinstance(atom, jcore.Literal) else env[atom]

    for index, eqn in enumerate(jaxpr.eqns):
        if index in inside:
            continue
        if index in found:
            activation = found[index]
            outs = [_rule_activation(graph, activation, read, state)]
            state.report.took(activation.family, _place(eqn, where))
        else:
            outs = _nested(eqn, [read(v) for v in eqn.invars], state, where)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _rule_activation(graph: Graph, activation: Activation, read: Callable, state: _State) -> Any:
    """The activation's value, computed by its own eqns, with ``rule.grad`` as its derivative."""
    eqns = [graph.jaxpr.eqns[i] for i in activation.eqns]
    made = {v for eqn in eqns for v in eqn.outvars}
    inputs = (v for eqn in eqns for v in eqn.invars if isinstance(v, jcore.Var))
    extras = list(dict.fromkeys(v for v in inputs if v not in made and v is not activation.x))
    assert activation.family is not None  # find_activations returns members of the family only
    rule = state.rule.bind(activation.family)

    def forward(x: Any, *extra_values: Any) -> Any:
        local = {activation.x: x, **dict(zip(extras, extra_values))}
        for eqn in eqns:
            values = [v.val if isinstance(v, jcore.Literal) else local[v] for v in eqn.invars]
            local.update(zip(eqn.outvars, _bind(eqn, values)))
        return local[eqns[-1].outvars[0]]

    @jax.custom_vjp
    def ruled(x: Any, *extra_values: Any) -> Any:
        return forward(x, *extra_values)

    def ruled_forward(x: Any, *extra_values: Any) -> tuple:
        y = forward(x, *extra_values)
        return y, (x, y, extra_values)

    def ruled_backward(residuals: tuple, dy: Any) -> tuple:
        x, y, extra_values = residuals
        return (rule.grad(x, y, dy), *(_zero_cotangent(v) for v in extra_values))

    ruled.defvjp(ruled_forward, ruled_backward)
    return ruled(read(activation.x), *(read(v) for v in extras))


def _zero_cotangent(value: Any) -> Any:
    dtype = np.dtype(value.dtype)
    if np.issubdtype(dtype, np.inexact):
        return jax.numpy.zeros_like(value)
    return np.zeros(np.shape(value), dtype=jax.dtypes.float0)


def _nested(eqn: Any, values: list, state: _State, where: str) -> list:
    """``eqn`` applied to ``values``, its sub-programs transformed when they hold ReLU-family ops."""
    inner = list(jcore.jaxprs_in_params(eqn.params))
    if not inner or not any(holds_relu(j) for j in inner):
        return _bind(eqn, values)
    kind = eqn.primitive.name
    place = _place(eqn, where)
    if kind in _CUSTOM_DERIVATIVES:
        state.report.unreached.append(
            f"{kind} {function_name(eqn) or ''} at {place}: a function with its own derivative whose "
            "ReLU-family operations keep their plain gradient".replace("  ", " ")
        )
        return _bind(eqn, values)
    inside = f"{place} (in {eqn.params.get('name', kind)})"
    params = {key: _transform_param(value, state, inside) for key, value in eqn.params.items()}
    if any(value is _GAINED_CONSTANTS for value in params.values()):
        if len(inner) == 1 and len(inner[0].invars) == len(values):  # a call: run its body in place
            return _evaluate(inner[0], [], values, state, inside)
        state.report.unreached.append(f"{kind} at {place}: its program could not be rebuilt under the rule")
        return _bind(eqn, values)
    with eqn.ctx.manager:
        out = eqn.primitive.bind(*values, **eqn.primitive.get_bind_params(params))
    return list(out) if eqn.primitive.multiple_results else [out]


def _transform_param(value: Any, state: _State, where: str) -> Any:
    if isinstance(value, tuple) and any(isinstance(v, (jcore.ClosedJaxpr, jcore.Jaxpr)) for v in value):
        return tuple(_transform_param(v, state, where) for v in value)
    if isinstance(value, jcore.ClosedJaxpr):
        return _transform_closed(value.jaxpr, value.consts, state, where)
    if isinstance(value, jcore.Jaxpr):
        closed = _transform_closed(value, [], state, where)
        return closed.jaxpr if not closed.consts else _GAINED_CONSTANTS
    return value


_GAINED_CONSTANTS = object()  # an open sub-jaxpr whose transformed version has constants


def _transform_closed(jaxpr: Any, consts: Any, state: _State, where: str) -> Any:
    """``jaxpr`` (same inputs and outputs) with its ReLU-family operations under the rule."""
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, weak_type=v.aval.weak_type) for v in jaxpr.invars]
    return jax.make_jaxpr(lambda *args: _evaluate(jaxpr, consts, list(args), state, where))(*avals)
