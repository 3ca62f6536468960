"""ReLU-family activations in a jaxpr, as Keras 3 and ``jax.nn`` write them on JAX.

:func:`find_activations` lists the activations of one jaxpr (a :class:`Graph`), outermost first:

- ``custom_jvp_call`` of ``jax.nn.relu``/``relu6`` (what ``keras.ops.relu``/``relu6``, fused
  ``activation="relu"``, ``keras.layers.ReLU``, ``Activation("relu")`` lower to);
- ``jit[name=leaky_relu](x, slope)`` (``jax.nn.leaky_relu``: ``LeakyReLU``, ``ReLU(negative_slope=a)``);
- activations of several eqns: ``relu(x)`` then ``jit[name=clip](·, 0, m)`` or ``min(·, m)``
  (``max_value`` other than 6, or written by hand); ``jit[name=_where](gt(x, t), x, 0)`` (a
  ``threshold``), possibly clipped; Keras' leaky composite ``pos(x) - a · relu(-x [+ t])``.

A PReLU (``relu(x) + a · relu(-x)`` with a learned ``a``) is no member of the family: its eqns are
listed in ``plain`` and keep their gradient, as at the layer level. An activation whose parameters
are not constants raises :class:`Unsupported` while matching (listed in ``unsupported``).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np

from ..rules import ReluFamily

__all__ = ["Activation", "Graph", "Unsupported", "find_activations", "function_name", "holds_relu"]

_JAX_NN_BODIES = {"relu": ["max"], "relu6": ["max", "min"]}


class Unsupported(Exception):
    """A ReLU-family activation whose parameters are not constants: no rule can be bound to it."""


@dataclasses.dataclass
class Activation:
    """One ReLU-family activation ``y = f(x)`` made of ``eqns`` (indices into one jaxpr, ascending;
    the last computes ``y``); ``family`` None for a PReLU."""

    x: Any
    family: ReluFamily | None
    eqns: list


class Graph:
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

    def eqn_of(self, atom: Any) -> tuple[Any, Any]:
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


def function_name(eqn: Any) -> str | None:
    """The name of the function an eqn calls: a ``jit``'s ``name``, a ``custom_jvp``'s function."""
    if "name" in eqn.params:
        return str(eqn.params["name"])
    call = eqn.params.get("call_jaxpr")
    source = getattr(getattr(getattr(call, "jaxpr", None), "debug_info", None), "func_src_info", None)
    return source.split(" ")[0] if source else None


def _single(graph: Graph, eqn: Any) -> tuple[Any, ReluFamily] | None:
    """``(x, family)`` when ``eqn`` alone is a ReLU-family activation of ``x``."""
    kind = eqn.primitive.name
    name = function_name(eqn)
    if kind == "custom_jvp_call" and name in _JAX_NN_BODIES and len(eqn.invars) == 1:
        if _primitive_names(eqn.params["call_jaxpr"].jaxpr) == _JAX_NN_BODIES[name]:
            return eqn.invars[0], ReluFamily(max_value=6.0) if name == "relu6" else ReluFamily()
    if kind in ("pjit", "jit") and name == "leaky_relu" and len(eqn.invars) == 2:
        slope = graph.constant(eqn.invars[1])
        if slope is None:
            raise Unsupported("a leaky ReLU whose negative_slope is not a constant")
        return eqn.invars[0], ReluFamily(negative_slope=slope)
    return None


def _is_call(eqn: Any, name: str) -> bool:
    return eqn is not None and eqn.primitive.name in ("pjit", "jit") and eqn.params.get("name") == name


def _match(graph: Graph, var: Any) -> Activation | None:
    """The ReLU-family activation computing ``var`` (outermost first), or None."""
    index, eqn = graph.eqn_of(var)
    if eqn is None or index is None:
        return None
    single = _single(graph, eqn)
    if single is not None:
        x, family = single
        return Activation(x, family, [index])
    kind = eqn.primitive.name
    if _is_call(eqn, "clip") or kind == "min":
        inner_var, cap = (eqn.invars[0], eqn.invars[2]) if kind != "min" else eqn.invars
        if kind == "min" and graph.constant(inner_var) is not None:  # min(m, relu(x))
            cap, inner_var = inner_var, cap
        low = graph.constant(eqn.invars[1]) if kind != "min" else 0.0
        inner = _match(graph, inner_var)
        if inner is None or inner.family is None or low != 0.0:
            return None
        if inner.family.negative_slope or inner.family.max_value is not None:
            return None
        if not graph.used_only_by(inner_var, [index]):
            return None
        max_value = graph.constant(cap)
        if max_value is None:
            raise Unsupported("a capped ReLU whose max_value is not a constant")
        family = dataclasses.replace(inner.family, max_value=max_value)
        return Activation(inner.x, family, sorted(inner.eqns + [index]))
    if _is_call(eqn, "_where") and len(eqn.invars) == 3:
        condition, x, zero = eqn.invars
        test_index, test = graph.eqn_of(condition)
        if test is None or test.primitive.name != "gt" or test.invars[0] is not x or graph.constant(zero) != 0.0:
            return None
        threshold = graph.constant(test.invars[1])
        if threshold is None:
            raise Unsupported("a thresholded ReLU whose threshold is not a constant")
        if not graph.used_only_by(condition, [index]):
            return None
        return Activation(x, ReluFamily(threshold=threshold), sorted([test_index, index]))
    if kind == "sub":
        return _leaky_composite(graph, index, eqn)
    if kind == "add":
        return _prelu(graph, index, eqn)
    return None


def _plain_relu(graph: Graph, atom: Any) -> tuple[Any, Any] | None:
    """``(index, input)`` when ``atom`` is computed by a lone plain ReLU."""
    index, eqn = graph.eqn_of(atom)
    single = _single(graph, eqn) if eqn is not None else None
    return (index, single[0]) if single is not None and single[1].is_plain else None


def _prelu(graph: Graph, index: int, eqn: Any) -> Activation | None:
    """``relu(x) + a · relu(-x)``: a PReLU (family None) when ``a`` is learned, else leaky."""
    for part in (0, 1):
        positive = _plain_relu(graph, eqn.invars[part])
        times_index, times = graph.eqn_of(eqn.invars[1 - part])
        if positive is None or times is None or times.primitive.name != "mul":
            continue
        for side in (0, 1):
            negative = _plain_relu(graph, times.invars[side])
            if negative is None:
                continue
            negated_index, negated = graph.eqn_of(negative[1])
            if negated is None or negated.primitive.name != "neg" or negated.invars[0] is not positive[1]:
                continue
            eqns = sorted([index, times_index, positive[0], negative[0], negated_index])
            if not all(graph.used_only_by(v, eqns) for i in eqns[:-1] for v in graph.jaxpr.eqns[i].outvars):
                return None
            factor = graph.constant(times.invars[1 - side])
            family = None if factor is None else ReluFamily(negative_slope=-factor)
            return Activation(positive[1], family, eqns)
    return None


def _leaky_composite(graph: Graph, index: int, eqn: Any) -> Activation | None:
    """Keras' ``pos(x) - a · relu(-x + t)``: a leaky ReLU with a cap or a threshold."""
    positive = _match(graph, eqn.invars[0])
    times_index, times = graph.eqn_of(eqn.invars[1])
    if positive is None or positive.family is None or positive.family.negative_slope:
        return None
    if times is None or times.primitive.name != "mul":
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
            raise Unsupported("a leaky ReLU whose negative_slope is not a constant")
        if shift_by != positive.family.threshold:
            return None
        eqns = sorted(set(eqns + [shift_index] + positive.eqns))
        if not all(graph.used_only_by(v, eqns) for i in eqns[:-1] for v in graph.jaxpr.eqns[i].outvars):
            return None
        return Activation(positive.x, dataclasses.replace(positive.family, negative_slope=slope), eqns)
    return None


_LAST_KINDS = ("add", "sub", "min", "custom_jvp_call", "pjit", "jit")


def find_activations(graph: Graph, unsupported: list, plain: list, where: str) -> dict:
    """``{index of the last eqn: Activation}`` for the ReLU-family activations of one jaxpr,
    outermost first (an activation inside a bigger one is part of it). Appends one line per
    activation whose parameters are not constants to ``unsupported``, and one per PReLU (at
    ``where``) to ``plain``."""
    found: dict = {}
    covered: set = set()
    for index in reversed(range(len(graph.jaxpr.eqns))):
        eqn = graph.jaxpr.eqns[index]
        if index in covered or eqn.primitive.name not in _LAST_KINDS:
            continue
        try:
            activation = _match(graph, eqn.outvars[0])
        except Unsupported as reason:
            if str(reason) not in unsupported:
                unsupported.append(str(reason))
            continue
        if activation is None or not np.issubdtype(np.dtype(activation.x.aval.dtype), np.floating):
            continue
        if any(i in covered for i in activation.eqns):
            continue
        covered.update(activation.eqns)
        if activation.family is None:
            place = "/".join(p for p in (where, str(eqn.source_info.name_stack)) if p) or "top level"
            plain.append(f"a PReLU at {place} (its slope is learned, not a constant)")
        else:
            found[index] = activation
    return found


def holds_relu(jaxpr: Any) -> bool:
    graph = Graph(jaxpr, [None] * len(jaxpr.constvars))
    for eqn in jaxpr.eqns:
        try:
            if _single(graph, eqn) is not None:
                return True
        except Unsupported:
            return True
        if any(holds_relu(inner) for inner in jcore.jaxprs_in_params(eqn.params)):
            return True
    return False
