"""A custom layer's ``call`` checked on PyTorch (:func:`saliency_kit.propagation.custom.check_call`'s
rule, read from the calls the layer makes): every ``torch`` function outside the sublayers a rule
covers that reads an explained value must be linear in it.

The call runs once, eagerly, on small values of the layer's argument shapes under a
``torch.overrides.TorchFunctionMode`` (:class:`_CheckMode`), which PyTorch hands every ``torch``
function and ``Tensor`` method the call makes. The mode follows which tensors carry explained
values by identity (``id`` of a tensor it keeps alive: tensors compare by value), lets through
what runs inside a covered sublayer (:func:`saliency_kit.propagation.rewriting.covered`, whose
outputs carry explained values when its inputs do), and classifies every other function that
reads an explained tensor as the TensorFlow and JAX checks do: shape-only, linear, linear in one
factor (a product with exactly one explained operand), or refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import torch
from torch.overrides import TorchFunctionMode, resolve_name

from ..model.keras_private import running_layers

__all__ = ["check_calls"]

# value-independent: the output depends on the input's shape, type or place only (or nothing)
_SHAPE = frozenset(
    {
        "shape", "size", "dim", "ndim", "ndimension", "numel", "nelement", "dtype", "device", "layout",
        "is_meta", "is_cuda", "is_cpu", "is_sparse", "is_quantized", "is_leaf", "requires_grad",
        "requires_grad_", "grad_fn", "is_floating_point", "is_complex", "is_contiguous", "stride",
        "storage_offset", "element_size", "get_device", "names", "data", "detach", "zeros_like",
        "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "new_zeros", "new_ones",
        "new_empty", "new_full", "len",
    }
)  # fmt: skip
# linear (or affine) in every operand that carries explained values
_LINEAR = frozenset(
    {
        "add", "sub", "subtract", "rsub", "neg", "negative", "pos", "positive", "reshape", "view",
        "view_as", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "expand", "expand_as",
        "broadcast_to", "permute", "transpose", "swapaxes", "swapdims", "movedim", "moveaxis", "t", "T",
        "mT", "contiguous", "clone", "alias", "narrow", "select", "getitem", "setitem", "index_select",
        "take", "chunk", "split", "tensor_split", "unbind", "stack", "cat", "concat", "concatenate",
        "hstack", "vstack", "repeat", "tile", "repeat_interleave", "roll", "flip", "fliplr", "flipud",
        "rot90", "diagonal", "tril", "triu", "sum", "mean", "cumsum", "copy", "resolve_conj",
        "resolve_neg", "atleast_1d", "atleast_2d", "atleast_3d",
    }
)  # fmt: skip
# casts: linear between floating types, refused to a type without gradient
_CASTS = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16", "cpu", "as_tensor", "tensor"})
# linear in one operand: at most one may carry explained values (``None``), or only those listed
_ONE_FACTOR: dict = {
    "mul": None,
    "multiply": None,
    "matmul": None,
    "mm": None,
    "bmm": None,
    "mv": None,
    "dot": None,
    "inner": None,
    "outer": None,
    "einsum": None,
    "tensordot": None,
    "linear": None,
    "conv1d": (0, "input"),
    "conv2d": (0, "input"),
    "conv3d": (0, "input"),
    "conv_transpose1d": (0, "input"),
    "conv_transpose2d": (0, "input"),
    "conv_transpose3d": (0, "input"),
    "div": (0, "input"),
    "divide": (0, "input"),
    "true_divide": (0, "input"),
    "truediv": (0,),
    "gather": (0, "input"),
    "take_along_dim": (0, "input"),
    "pad": (0, "input"),
    "where": (1, 2, "input", "other"),
    "masked_fill": (0, 2, "input", "value"),
    "index_put": (0, 2, "input", "values"),
}
_REDUCTIONS = ("sum", "mean")
# operators with an in-place (``__iadd__``) and a reflected (``__radd__``) form; ``a / x`` stays
# ``rtruediv``, refused for an explained divisor
_REFLECTED = ("add", "sub", "mul", "matmul", "truediv")
# value-independent outside a rule; inside one, a detached copy still follows the explained values
_DETACHING = ("detach", "data")


def _name(func: Any) -> tuple[str, str, bool]:
    """``(kind, full name, in place)`` of a ``torch`` function: ``torch.Tensor.__iadd__`` is
    ``("add", ..., True)``, ``torch.Tensor.__rmul__`` ``("mul", ..., False)``,
    ``torch.nn.functional.pad`` ``("pad", ..., False)``."""
    full = resolve_name(func) or getattr(func, "__qualname__", None) or repr(func)
    kind = full.removesuffix(".__get__").rsplit(".", 1)[-1]
    if kind.startswith("__") and kind.endswith("__"):
        kind = kind[2:-2]
        if kind[:1] in ("i", "r") and kind[1:] in _REFLECTED:
            return ("rtruediv" if kind == "rtruediv" else kind[1:]), full, kind[0] == "i"
        return kind, full, kind == "setitem"
    if kind.endswith("_") and kind != "requires_grad_":
        return kind[:-1], full, True
    return kind, full, False


def _tensors(value: Any) -> list:
    return [v for v in keras.tree.flatten(value) if isinstance(v, torch.Tensor)] if value is not None else []


def _float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)


class _CheckMode(TorchFunctionMode):
    """Runs every ``torch`` call, following explained tensors and refusing the calls no rule
    covers that are not linear in them (see the module docstring)."""

    def __init__(self, covering: list) -> None:
        super().__init__()
        self.covering = covering  # non-empty while a covered sublayer runs
        self.alive: dict = {}  # id(tensor) -> tensor: tensors compare by value, not identity
        self.refusal: tuple | None = None  # the first (kind, name, why) refused

    def refuse(self, kind: str, name: str, why: str) -> None:
        """Noted, and raised once the call returns (raised here, Keras would wrap it in its
        report of the layer that was running)."""
        if self.refusal is None:
            self.refusal = (kind, name, why)

    def mark(self, tensors: list) -> None:
        for t in tensors:
            if _float(t):
                self.alive[id(t)] = t

    def is_alive(self, value: Any) -> bool:
        return any(id(t) in self.alive for t in _tensors(value))

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        reads = [i for i, a in enumerate(args) if self.is_alive(a)] + [k for k, a in kwargs.items() if self.is_alive(a)]
        out = func(*args, **kwargs)
        if not reads:
            return out
        kind, full, in_place = _name(func)
        if kind in _SHAPE and not (self.covering and kind in _DETACHING):
            return out
        if not self.covering:  # inside a rule, whatever is computed from explained values is one
            self.classify(kind, full, reads, args, kwargs, out)
        self.mark(_tensors(out))
        if in_place and args and isinstance(args[0], torch.Tensor):
            self.mark([args[0]])
        return out

    def classify(self, kind: str, full: str, reads: list, args: tuple, kwargs: dict, out: Any) -> None:
        where = f"{full} at {running_layers()[0] or 'the call'}"
        if kind in _LINEAR:
            if kind in _REDUCTIONS and 0 in _reduced_axes(args, kwargs):
                self.refuse(kind, where, "across the batch (rows mix)")
        elif kind in _ONE_FACTOR:
            allowed = _ONE_FACTOR[kind]
            if allowed is None:
                if len(reads) > 1 or any(len([t for t in _tensors(a) if id(t) in self.alive]) > 1 for a in args):
                    self.refuse(kind, where, "as a product of two of them")
            elif any(i not in allowed for i in reads):
                self.refuse(kind, where, "in a place where it is not linear")
        elif kind in _CASTS:
            if not all(_float(t) for t in _tensors(out)):
                self.refuse(kind, where, "as a cast to a type without gradient")
        else:
            self.refuse(kind, where, "by an operation that is not linear")


def _reduced_axes(args: tuple, kwargs: dict) -> tuple:
    """The axes ``sum``/``mean`` reduce (every axis when none are given)."""
    x = args[0] if args else kwargs.get("input")
    axes = args[1] if len(args) > 1 and not isinstance(args[1], torch.dtype) else kwargs.get("dim", kwargs.get("axis"))
    rank = x.dim() if isinstance(x, torch.Tensor) else 1
    if axes is None or (isinstance(axes, (tuple, list)) and not axes):
        return tuple(range(rank))
    axes = axes if isinstance(axes, (tuple, list)) else (axes,)
    return tuple(int(a) % max(rank, 1) for a in axes)


def _example(shape: tuple, dtype: Any, generator: Any) -> Any:
    """A small tensor of ``shape`` (``None`` sizes 2) and ``dtype``: uniform in [0.1, 1) for
    floating types, zeros otherwise (valid indices)."""
    size = tuple(2 if d is None else int(d) for d in shape)
    dtype = getattr(torch, keras.backend.standardize_dtype(dtype))
    if dtype.is_floating_point:
        return (0.1 + 0.9 * torch.rand(size, generator=generator)).to(dtype)
    return torch.zeros(size, dtype=dtype)


def check_calls(
    layer: Any, path: str, run: Callable, shapes: list, live: list, scopes: list, refuse_op: Callable
) -> bool:
    """``run(*tensors)`` (the layer's call on ``shapes``, ``[(shape, dtype)]`` with ``None`` for
    an unknown size; ``live``: which tensors carry explained values) run once on small values and
    checked; returns whether its output depends on an explained value. ``scopes`` is non-empty
    while a covered sublayer runs (:func:`saliency_kit.propagation.rewriting.covered`);
    ``refuse_op(layer, path, kind, name, why)`` raises the refusal."""
    generator = torch.Generator().manual_seed(0)
    tensors = [_example(shape, dtype, generator) for shape, dtype in shapes]
    mode = _CheckMode(scopes)
    mode.mark([t for t, flag in zip(tensors, live) if flag])
    try:
        with mode:
            out = run(*tensors)
    except Exception:
        if mode.refusal is None:
            raise
        refuse_op(layer, path, *mode.refusal)  # what failed after a refusal is no news
    if mode.refusal is not None:
        refuse_op(layer, path, *mode.refusal)
    return mode.is_alive(out)
