"""A final softmax/sigmoid recognised from a layer's traced JAX program (its jaxpr), and the
values before it taken inside a running computation.

The layer's call is traced with :func:`jax.make_jaxpr`, its variables passed as arguments
through a ``keras.StatelessScope`` (so nothing of an enclosing trace is closed over). Its output
*ends in a squash* when, walking back from it through the operations that keep values
(``reshape``, ``convert_element_type``, ``squeeze``, ``expand_dims``, ``copy``), the walk meets a
``logistic``, or a softmax or sigmoid written out in operations (``exp(a) / Σ exp(a)`` over the
last axis, ``a`` possibly minus its maximum; ``1 / (1 + exp(-a))``), which is how Keras and
``jax.nn`` write them. Calls (``jit``, ``custom_jvp_call``, ...) are looked into: a call that is
the squash of one of its arguments (``jax.nn.softmax``'s ``custom_jvp``) gives that argument; a
``jit`` call holding a squash of its own intermediate values is rewritten inside; a custom-rule
call holding one cannot be rewritten without changing its rule: ``"opaque"``.

:func:`eager_or_traced` evaluates the jaxpr with the squash's output replaced by its input, so
the value-keeping operations after it apply to the logits. Inside ``jax.jit`` the variables'
values (tracers there) are read when it runs and passed as the jaxpr's arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import keras
import numpy as np
from jax.extend import core

__all__ = ["traced_squash", "eager_or_traced", "SQUASH_PRIMITIVES"]

#: JAX primitive -> the squash it is
SQUASH_PRIMITIVES = {"logistic": "sigmoid"}
_SAME_VALUES = ("reshape", "convert_element_type", "squeeze", "expand_dims", "copy", "copy_p")
_BROADCASTS = ("broadcast_in_dim", "reshape", "expand_dims", "convert_element_type")
_CALLS_REWRITTEN = ("jit", "pjit", "closed_call", "core_call", "remat", "checkpoint")


@dataclass(frozen=True)
class _Found:
    """A squash ending a jaxpr's output: in the jaxpr reached through the call equations at
    ``path`` (indices), ``out`` (the squash's output) is to be replaced by ``logits`` (its input);
    ``opaque`` when that place is inside a call with a rule of its own."""

    squash: str
    path: tuple = ()
    out: Any = None
    logits: Any = None
    opaque: bool = False


def _producers(jaxpr: Any) -> dict:
    return {id(v): (i, eqn) for i, eqn in enumerate(jaxpr.eqns) for v in eqn.outvars}


def _made_by(var: Any, producers: dict) -> Any:
    if isinstance(var, core.Literal):
        return None
    found = producers.get(id(var))
    return found[1] if found else None


def _skip(var: Any, producers: dict, names: Sequence[str]) -> Any:
    eqn = _made_by(var, producers)
    while eqn is not None and eqn.primitive.name in names:
        var = eqn.invars[0]
        eqn = _made_by(var, producers)
    return var


def _is_one(var: Any, producers: dict, consts: dict) -> bool:
    var = _skip(var, producers, _BROADCASTS)
    value = var.val if isinstance(var, core.Literal) else consts.get(id(var))
    return value is not None and np.size(value) == 1 and float(np.ravel(np.asarray(value))[0]) == 1.0


def _primitive(var: Any, producers: dict) -> str | None:
    eqn = _made_by(var, producers)
    return eqn.primitive.name if eqn is not None else None


def _unshifted(var: Any, producers: dict) -> Any:
    """``a`` for ``a - max(a)`` over the last axis (the stable softmax's shift), else ``var``."""
    shifted = _made_by(var, producers)
    if shifted is None or shifted.primitive.name != "sub":
        return var
    peak = _made_by(_skip(shifted.invars[1], producers, (*_BROADCASTS, "stop_gradient")), producers)
    if peak is not None and peak.primitive.name == "max":  # max(-inf, reduce_max(a))
        peak = next((_made_by(v, producers) for v in peak.invars if _made_by(v, producers)), None)
    if peak is None or peak.primitive.name != "reduce_max" or peak.invars[0] is not shifted.invars[0]:
        return var
    return shifted.invars[0]


def _by_hand(eqn: Any, producers: dict, consts: dict) -> tuple[str, Any] | None:
    """``(squash, its input)`` when ``eqn`` ends a softmax or sigmoid written out in operations:
    ``exp(a) / Σ exp(a)`` over the last axis (``a`` possibly minus its maximum), ``1 / (1 + exp(-a))``."""
    if eqn.primitive.name != "div":
        return None
    numerator, denominator = eqn.invars
    if _is_one(numerator, producers, consts):
        total = _made_by(_skip(denominator, producers, _BROADCASTS), producers)
        if total is None or total.primitive.name != "add":
            return None
        parts = [v for v in total.invars if not _is_one(v, producers, consts)]
        if len(parts) != 1 or _primitive(parts[0], producers) != "exp":
            return None
        negated = _made_by(parts[0], producers).invars[0]
        if _primitive(negated, producers) != "neg":
            return None
        return "sigmoid", _made_by(negated, producers).invars[0]
    exp = _made_by(numerator, producers)
    summed = _made_by(_skip(denominator, producers, _BROADCASTS), producers)
    if exp is None or exp.primitive.name != "exp" or summed is None or summed.primitive.name != "reduce_sum":
        return None
    rank = len(numerator.aval.shape)
    if tuple(summed.params.get("axes", ())) != (rank - 1,):
        return None
    summand = _made_by(summed.invars[0], producers)
    if summand is None or summand.primitive.name != "exp":
        return None
    logits = _unshifted(exp.invars[0], producers)
    if _unshifted(summand.invars[0], producers) is not logits:
        return None
    return "softmax", logits


def _inner(eqn: Any) -> tuple[str, Any] | None:
    """``(parameter name, closed jaxpr)`` of a call equation, else ``None``."""
    for key, value in eqn.params.items():
        if isinstance(value, core.ClosedJaxpr):
            return key, value
        if isinstance(value, core.Jaxpr):
            return key, core.ClosedJaxpr(value, ())
    return None


def _find(jaxpr: Any, var: Any, consts: dict) -> _Found | int | None:
    """What ``var`` of ``jaxpr`` is: a :class:`_Found` squash followed by value-keeping operations,
    the index of the input it keeps the values of, or ``None``."""
    producers = _producers(jaxpr)
    while True:
        if isinstance(var, core.Literal):
            return None
        if id(var) not in producers:
            index = [i for i, v in enumerate(jaxpr.invars) if v is var]
            return index[0] if index else None
        position, eqn = producers[id(var)]
        name = eqn.primitive.name
        if name in _SAME_VALUES:
            var = eqn.invars[0]
            continue
        if name in SQUASH_PRIMITIVES:
            return _Found(SQUASH_PRIMITIVES[name], (), var, eqn.invars[0])
        by_hand = _by_hand(eqn, producers, consts)
        if by_hand is not None:
            return _Found(by_hand[0], (), var, by_hand[1])
        inner = _inner(eqn)
        if inner is None:
            return None
        closed = inner[1]
        inner_consts = {id(v): c for v, c in zip(closed.jaxpr.constvars, closed.consts)}
        found = _find(closed.jaxpr, closed.jaxpr.outvars[eqn.outvars.index(var)], inner_consts)
        if isinstance(found, int):  # the call keeps the values of one of its arguments
            var = eqn.invars[found]
            continue
        if found is None:
            return None
        argument = [i for i, v in enumerate(closed.jaxpr.invars) if v is found.logits]
        if not found.path and argument:  # the call is the squash of its argument
            return _Found(found.squash, (), var, eqn.invars[argument[0]], found.opaque)
        opaque = found.opaque or name not in _CALLS_REWRITTEN
        return _Found(found.squash, (position, *found.path), found.out, found.logits, opaque)


def _substituted(jaxpr: Any, found: _Found, path: tuple | None = None) -> Any:
    """``jaxpr`` with ``found.out`` replaced by ``found.logits`` (inside the calls on its path)."""
    path = found.path if path is None else path
    if not path:

        def swap(v: Any) -> Any:
            return found.logits if v is found.out else v

        eqns = [eqn.replace(invars=[swap(v) for v in eqn.invars]) for eqn in jaxpr.eqns]
        return jaxpr.replace(eqns=eqns, outvars=[swap(v) for v in jaxpr.outvars])
    eqns = list(jaxpr.eqns)
    call = _inner(eqns[path[0]])
    assert call is not None  # the path goes through calls only
    key, closed = call
    inner = core.ClosedJaxpr(_substituted(closed.jaxpr, found, path[1:]), closed.consts)
    eqns[path[0]] = eqns[path[0]].replace(params={**eqns[path[0]].params, key: inner})
    return jaxpr.replace(eqns=eqns)


def _traced(call: Callable, variables: Sequence[Any], values: list, args: list, kwargs: dict) -> Any:
    """``call(*args, **kwargs)`` as a closed jaxpr of ``(*values, *args)``: each of ``variables``
    read as the matching entry of ``values``."""

    def pure(values: list, args: list) -> Any:
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return call(*args, **kwargs)

    return jax.make_jaxpr(pure)(values, args)


def _squash_in(closed: Any) -> _Found | None:
    if len(closed.jaxpr.outvars) != 1:
        return None
    consts = {id(v): c for v, c in zip(closed.jaxpr.constvars, closed.consts)}
    found = _find(closed.jaxpr, closed.jaxpr.outvars[0], consts)
    return found if isinstance(found, _Found) else None


def traced_squash(call: Callable, specs: Sequence[tuple], variables: Sequence[Any] = ()) -> tuple[str, str] | None:
    """``(kind, squash)`` for ``call(*inputs)``'s single output, else ``None``; ``specs`` the
    inputs' ``(shape, dtype)`` (an unknown size taken as 2), ``variables`` those ``call`` reads.

    ``squash`` is ``"sigmoid"`` or ``"softmax"``; ``kind`` is ``"traced"`` (:func:`eager_or_traced`
    reaches the values before it) or ``"opaque"`` (the squash is inside a call with a
    differentiation rule of its own, computed from values the call makes). ``None`` also when
    ``call`` cannot be traced on abstract inputs.
    """
    args = [jax.ShapeDtypeStruct(tuple(2 if s is None else int(s) for s in shape), dtype) for shape, dtype in specs]
    values = [jax.ShapeDtypeStruct(tuple(v.shape), keras.backend.standardize_dtype(v.dtype)) for v in variables]
    try:
        closed = _traced(call, variables, values, args, {})
    except Exception:  # noqa: BLE001 - a layer that cannot be traced abstractly: not recognised
        return None
    found = _squash_in(closed)
    if found is None:
        return None
    return ("opaque" if found.opaque else "traced"), found.squash


def eager_or_traced(call: Callable, variables: Sequence[Any] = ()) -> Callable:
    """``run(*args) -> values``: ``call(*args)``'s values before its final softmax/sigmoid,
    passed through the value-keeping operations after it; eagerly or inside ``jax.jit``
    (``ValueError`` when the output does not end in one). ``variables``: those ``call`` reads,
    passed to the traced program as arguments with their current values (a ``StatelessScope``'s
    when one is active)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        values = [v.value for v in variables]
        flat, tree = jax.tree.flatten(list(args))
        closed = _traced(lambda *a: call(*jax.tree.unflatten(tree, list(a)), **kwargs), variables, values, flat, {})
        found = _squash_in(closed)
        if found is None or found.opaque:
            raise ValueError(
                "the final softmax/sigmoid found when the model was first traced is not there when it "
                "runs; use score='output'; received an output that does not end in one."
            )
        jaxpr = _substituted(closed.jaxpr, found)
        (out,) = jax.core.eval_jaxpr(jaxpr, closed.consts, *values, *flat)
        return out

    return run
