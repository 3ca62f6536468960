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

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np

from ..rules import ModifiedBackprop, ReluFamily, as_rule

__all__ = ["RuleReport", "with_rule"]

_CUSTOM_DERIVATIVES = ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin")
_JAX_NN_BODIES = {"relu": ["max"], "relu6": ["max", "min"]}


class _Unsupported(Exception):
    """A ReLU-family activation whose parameters are not constants: no rule can be bound to it."""


@dataclasses.dataclass
class RuleReport:
    """What :func:`with_rule`'s wrapped function took over, filled in each time it is traced.

    ``ops``: one readable line per ReLU-family operation whose gradient follows the rule, e.g.
    ``"relu at dense"``, ``"leaky_relu(negative_slope=0.2) at leaky_re_lu"``, ``"relu at
    simple_rnn (in scan)"``; ``families``: the :class:`~saliency_kit.rules.ReluFamily` of each, in
    the same order. ``unreached``: one line per function with its own derivative
    (``custom_jvp``/``custom_vjp``) that holds ReLU-family operations the rule cannot reach.
    ``unsupported``: one line per activation whose parameters are not constants. ``complete``:
    neither happened.
    """

    rule: ModifiedBackprop
    ops: list = dataclasses.field(default_factory=list)
    families: list = dataclasses.field(default_factory=list)
    unreached: list = dataclasses.field(default_factory=list)
    unsupported: list = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unreached and not self.unsupported

    def check(self, what: str) -> None:
        """``ValueError`` naming ``what`` (e.g. ``"layer 'block'"``) unless the rule reached every
        ReLU-family operation."""
        if self.complete:
            return
        problems = "; ".join(self.unreached + self.unsupported)
        raise ValueError(
            f"cannot apply {type(self.rule).__name__} to every ReLU of {what}: {problems}. Its map "
            "would silently mix plain and modified gradients; compute these activations with "
            "keras.activations.relu / keras.layers.ReLU (constant parameters) in the model's own "
            f"graph, not inside a function with its own custom derivative; received {what}."
        )

    def _clear(self) -> None:
        for entries in (self.ops, self.families, self.unreached, self.unsupported):
            entries.clear()


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
        report._clear()
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        flat = _evaluate(closed.jaxpr, closed.consts, jax.tree.leaves(args), _State(rule, report), "")
        return jax.tree.unflatten(jax.tree.structure(out_shape), flat)

    return wrapped, report


@dataclasses.dataclass
class _State:
    rule: ModifiedBackprop
    report: RuleReport


@dataclasses.dataclass
class _Activation:
    """One ReLU-family activation ``y = f(x)`` made of ``eqns`` (indices into one jaxpr, ascending;
    the last computes ``y``)."""

    x: Any
    family: ReluFamily
    eqns: list


# -- reading a jaxpr -------------------------------------------------------------------------------
class _Graph:
    """One jaxpr with its constants: who produces each variable, and how often it is used."""

    def __init__(self, jaxpr: Any, consts: Any) -> None:
        self.jaxpr = jaxpr
        self.consts = dict(zip(jaxpr.constvars, consts))
        self.producer: dict = {}
        self.uses: collections.Counter = collections.Counter()
        for index, eqn in enumerate(jaxpr.eqns):
            for var in eqn.outvars:
                self.producer[var] = index
            self.uses.update(v for v in eqn.invars if isinstance(v, jcore.Var))
        self.uses.update(v for v in jaxpr.outvars if isinstance(v, jcore.Var))

    def eqn_of(self, atom: Any) -> tuple[int, Any] | tuple[None, None]:
        index = self.producer.get(atom) if isinstance(atom, jcore.Var) else None
        return (index, self.jaxpr.eqns[index]) if index is not None else (None, None)

    def constant(self, atom: Any) -> float | None:
        """The one value a constant atom holds (a literal, or a constant of the jaxpr), else None."""
        if isinstance(atom, jcore.Literal):
            value = atom.val
        elif atom in self.consts and not isinstance(self.consts[atom], jax.core.Tracer):
            value = self.consts[atom]
        else:
            return None
        value = np.asarray(value)
        if value.size == 0 or not np.issubdtype(value.dtype, np.number) or np.any(value != value.flat[0]):
            return None
        return float(str(value.flat[0]))  # float32 0.1 -> 0.1, as written

    def used_only_by(self, var: Any, indices: Any) -> bool:
        inside = sum(1 for i in indices for v in self.jaxpr.eqns[i].invars if v is var)
        return self.uses[var] == inside


def _primitive_names(jaxpr: Any) -> list:
    names = []
    for eqn in jaxpr.eqns:
        inner = list(jcore.jaxprs_in_params(eqn.params))
        names += [n for j in inner for n in _primitive_names(j)] if inner else [eqn.primitive.name]
    return names


def _function_name(eqn: Any) -> str | None:
    """The name of the function an eqn calls: a ``jit``'s ``name``, a ``custom_jvp``'s function."""
    if "name" in eqn.params:
        return str(eqn.params["name"])
    call = eqn.params.get("call_jaxpr")
    source = getattr(getattr(getattr(call, "jaxpr", None), "debug_info", None), "func_src_info", None)
    return source.split(" ")[0] if source else None


def _single(graph: _Graph, eqn: Any) -> tuple[Any, ReluFamily] | None:
    """``(x, family)`` when ``eqn`` alone is a ReLU-family activation of ``x``."""
    kind = eqn.primitive.name
    name = _function_name(eqn)
    if kind == "custom_jvp_call" and name in _JAX_NN_BODIES and len(eqn.invars) == 1:
        if _primitive_names(eqn.params["call_jaxpr"].jaxpr) == _JAX_NN_BODIES[name]:
            return eqn.invars[0], ReluFamily(max_value=6.0) if name == "relu6" else ReluFamily()
    if kind in ("pjit", "jit") and name == "leaky_relu" and len(eqn.invars) == 2:
        slope = graph.constant(eqn.invars[1])
        if slope is None:
            raise _Unsupported("a leaky ReLU whose negative_slope is not a constant")
        return eqn.invars[0], ReluFamily(negative_slope=slope)
    return None


def _is_call(eqn: Any, name: str) -> bool:
    return eqn is not None and eqn.primitive.name in ("pjit", "jit") and eqn.params.get("name") == name


def _match(graph: _Graph, var: Any) -> _Activation | None:
    """The ReLU-family activation computing ``var`` (outermost first), or None."""
    index, eqn = graph.eqn_of(var)
    if eqn is None or index is None:
        return None
    single = _single(graph, eqn)
    if single is not None:
        x, family = single
        return _Activation(x, family, [index])
    kind = eqn.primitive.name
    if _is_call(eqn, "clip") or kind == "min":
        inner_var, cap = (eqn.invars[0], eqn.invars[2]) if kind != "min" else eqn.invars
        if kind == "min" and graph.constant(inner_var) is not None:  # min(m, relu(x))
            cap, inner_var = inner_var, cap
        low = graph.constant(eqn.invars[1]) if kind != "min" else 0.0
        inner = _match(graph, inner_var)
        if inner is None or low != 0.0 or inner.family.negative_slope or inner.family.max_value is not None:
            return None
        if not graph.used_only_by(inner_var, [index]):
            return None
        max_value = graph.constant(cap)
        if max_value is None:
            raise _Unsupported("a capped ReLU whose max_value is not a constant")
        family = dataclasses.replace(inner.family, max_value=max_value)
        return _Activation(inner.x, family, sorted(inner.eqns + [index]))
    if _is_call(eqn, "_where") and len(eqn.invars) == 3:
        condition, x, zero = eqn.invars
        test_index, test = graph.eqn_of(condition)
        if test is None or test.primitive.name != "gt" or test.invars[0] is not x or graph.constant(zero) != 0.0:
            return None
        threshold = graph.constant(test.invars[1])
        if threshold is None:
            raise _Unsupported("a thresholded ReLU whose threshold is not a constant")
        if not graph.used_only_by(condition, [index]):
            return None
        return _Activation(x, ReluFamily(threshold=threshold), sorted([test_index, index]))
    if kind == "sub":
        return _leaky_composite(graph, index, eqn)
    return None


def _leaky_composite(graph: _Graph, index: int, eqn: Any) -> _Activation | None:
    """Keras' ``pos(x) - a · relu(-x + t)``: a leaky ReLU with a cap or a threshold."""
    positive = _match(graph, eqn.invars[0])
    times_index, times = graph.eqn_of(eqn.invars[1])
    if positive is None or positive.family.negative_slope or times is None or times.primitive.name != "mul":
        return None
    for part in (0, 1):
        relu_index, relu = graph.eqn_of(times.invars[part])
        single = _single(graph, relu) if relu is not None else None
        if single is None or not single[1].is_plain:
            continue
        eqns = [index, times_index, relu_index]
        shift_index, shift = graph.eqn_of(single[0])
        shift_by: float | None = 0.0
        if shift is not None and shift.primitive.name == "add":
            constants = [graph.constant(v) for v in shift.invars]
            negated = shift.invars[0] if constants[1] is not None else shift.invars[1]
            shift_by = constants[1] if constants[1] is not None else constants[0]
            eqns.append(shift_index)
            shift_index, shift = graph.eqn_of(negated)
        if shift is None or shift.primitive.name != "neg" or shift.invars[0] is not positive.x:
            continue
        slope = graph.constant(times.invars[1 - part])
        if slope is None:
            raise _Unsupported("a leaky ReLU whose negative_slope is not a constant")
        if shift_by != positive.family.threshold:
            return None
        eqns = sorted(set(eqns + [shift_index] + positive.eqns))
        if not all(graph.used_only_by(v, eqns) for i in eqns[:-1] for v in graph.jaxpr.eqns[i].outvars):
            return None
        return _Activation(positive.x, dataclasses.replace(positive.family, negative_slope=slope), eqns)
    return None


_LAST_KINDS = ("sub", "min", "custom_jvp_call", "pjit", "jit")


def _activations(graph: _Graph, report: RuleReport) -> dict:
    """``{index of the last eqn: _Activation}`` for the activations of one jaxpr, outermost first
    (an activation inside a bigger one is part of it)."""
    found: dict = {}
    covered: set = set()
    for index in reversed(range(len(graph.jaxpr.eqns))):
        eqn = graph.jaxpr.eqns[index]
        if index in covered or eqn.primitive.name not in _LAST_KINDS:
            continue
        try:
            activation = _match(graph, eqn.outvars[0])
        except _Unsupported as reason:
            if str(reason) not in report.unsupported:
                report.unsupported.append(str(reason))
            continue
        if activation is None or not np.issubdtype(np.dtype(activation.x.aval.dtype), np.floating):
            continue
        if any(i in covered for i in activation.eqns):
            continue
        covered.update(activation.eqns)
        found[index] = activation
    return found


def _holds_relu(jaxpr: Any) -> bool:
    graph = _Graph(jaxpr, [None] * len(jaxpr.constvars))
    for eqn in jaxpr.eqns:
        try:
            if _single(graph, eqn) is not None:
                return True
        except _Unsupported:
            return True
        if any(_holds_relu(inner) for inner in jcore.jaxprs_in_params(eqn.params)):
            return True
    return False


# -- interpreting ------------------------------------------------------------------------------------
def _bind(eqn: Any, values: list) -> list:
    with eqn.ctx.manager:
        out = eqn.primitive.bind(*values, **eqn.primitive.get_bind_params(eqn.params))
    return list(out) if eqn.primitive.multiple_results else [out]


def _place(eqn: Any, where: str) -> str:
    stack = str(eqn.source_info.name_stack)
    place = "/".join(p for p in (where, stack) if p)
    return place or "top level"


def _label(family: ReluFamily) -> str:
    if family.negative_slope and family.max_value is None and family.threshold == 0.0:
        return f"leaky_relu(negative_slope={family.negative_slope})"
    return family.name


def _evaluate(jaxpr: Any, consts: Any, args: list, state: _State, where: str) -> list:
    graph = _Graph(jaxpr, consts)
    found = _activations(graph, state.report)
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
            state.report.ops.append(f"{_label(activation.family)} at {_place(eqn, where)}")
            state.report.families.append(activation.family)
        else:
            outs = _nested(eqn, [read(v) for v in eqn.invars], state, where)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _rule_activation(graph: _Graph, activation: _Activation, read: Callable, state: _State) -> Any:
    """The activation's value, computed by its own eqns, with ``rule.grad`` as its derivative."""
    eqns = [graph.jaxpr.eqns[i] for i in activation.eqns]
    made = {v for eqn in eqns for v in eqn.outvars}
    inputs = (v for eqn in eqns for v in eqn.invars if isinstance(v, jcore.Var))
    extras = list(dict.fromkeys(v for v in inputs if v not in made and v is not activation.x))
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
    if not inner or not any(_holds_relu(j) for j in inner):
        return _bind(eqn, values)
    kind = eqn.primitive.name
    place = _place(eqn, where)
    if kind in _CUSTOM_DERIVATIVES:
        state.report.unreached.append(
            f"{kind} {_function_name(eqn) or ''} at {place}: a function with its own derivative whose "
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
