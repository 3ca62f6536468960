"""A custom layer's ``call`` checked on JAX (:func:`saliency_kit.propagation.custom.check_call`'s
rule, read from the traced program): every primitive outside the sublayers a rule covers that
reads an explained value must be linear in it.

The call is traced to a jaxpr on the layer's argument shapes; the covered sublayers' primitives
carry their name scope (:func:`saliency_kit.propagation.rewriting.covered`). Primitives that call
other programs (``pjit``, ``custom_jvp_call``, ...) are followed inside.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core

__all__ = ["check_jaxpr"]

# linear (or affine) in every operand that carries explained values
_LINEAR = frozenset(
    {
        "add",
        "add_any",
        "sub",
        "neg",
        "reshape",
        "transpose",
        "broadcast_in_dim",
        "squeeze",
        "expand_dims",
        "slice",
        "rev",
        "copy",
        "copy_p",
        "reduce_sum",
        "cumsum",
        "concatenate",
        "reduce_precision",
    }
)
# linear in one operand: at most one may carry explained values (and only those listed)
_ONE_FACTOR: dict = {
    "mul": None,
    "dot_general": None,
    "conv_general_dilated": (0,),
    "div": (0,),
    "dynamic_slice": (0,),
    "gather": (0,),
    "pad": (0,),
    "select_n": "all but first",
    "dynamic_update_slice": (0, 1),
}
_NO_GRADIENT = frozenset({"stop_gradient"})


def _float(var: Any) -> bool:
    return jnp.issubdtype(var.aval.dtype, jnp.floating)


def _inner(eqn: Any) -> Any:
    """The program a call-like primitive runs (a ``ClosedJaxpr`` or ``Jaxpr``), or ``None``."""
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(name)
        if inner is not None:
            return inner
    return None


def _walk(jaxpr: Any, alive: set, covered: Callable[[Any], bool], refuse: Callable[[Any, str], None]) -> None:
    for eqn in jaxpr.eqns:
        reads = [i for i, v in enumerate(eqn.invars) if isinstance(v, core.Var) and v in alive]
        if not reads:
            continue
        outputs = [v for v in eqn.outvars if _float(v)]
        name = eqn.primitive.name
        if covered(eqn) or name in _NO_GRADIENT:
            if name not in _NO_GRADIENT:
                alive.update(outputs)
            continue
        inner = _inner(eqn)
        if inner is not None:
            program = getattr(inner, "jaxpr", inner)
            inner_alive = {program.invars[i] for i in reads if _float(program.invars[i])}
            _walk(program, inner_alive, covered, refuse)
            returned = zip(eqn.outvars, program.outvars)
            alive.update(v for v, w in returned if isinstance(w, core.Var) and w in inner_alive)
            continue
        if name in _LINEAR:
            if name == "reduce_sum" and 0 in eqn.params.get("axes", ()):
                refuse(eqn, "across the batch (rows mix)")
        elif name in _ONE_FACTOR:
            allowed = _ONE_FACTOR[name]
            if allowed is None:
                if len(reads) > 1:
                    refuse(eqn, "as a product of two of them")
            elif allowed == "all but first":
                if 0 in reads:
                    refuse(eqn, "as a condition")
            elif any(i not in allowed for i in reads):
                refuse(eqn, "in a place where it is not linear")
        elif name == "convert_element_type":
            if not outputs:
                refuse(eqn, "as a cast to a type without gradient")
        else:
            refuse(eqn, "by an operation that is not linear")
        alive.update(outputs)


def check_jaxpr(
    layer: Any, path: str, run: Callable, shapes: list, live: list, scopes: list, refuse_op: Callable
) -> bool:
    """``run(*tensors)`` (the layer's call on ``shapes``, ``[(shape, dtype)]`` with ``None`` for an
    unknown size; ``live``: which tensors carry explained values) traced and checked; returns
    whether its output depends on an explained value. ``refuse_op(layer, path, kind, name, why)``
    raises the refusal."""
    arguments = [jax.ShapeDtypeStruct(tuple(2 if d is None else d for d in shape), dtype) for shape, dtype in shapes]
    program = jax.make_jaxpr(run)(*arguments).jaxpr
    alive = {v for v, flag in zip(program.invars, live) if flag and _float(v)}

    def covered(eqn: Any) -> bool:
        stack = str(eqn.source_info.name_stack)
        return any(scope in stack for scope in scopes)

    def refuse(eqn: Any, why: str) -> None:
        refuse_op(layer, path, eqn.primitive.name, str(eqn.source_info.name_stack) or eqn.primitive.name, why)

    _walk(program, alive, covered, refuse)
    return any(isinstance(v, core.Var) and v in alive for v in program.outvars)
