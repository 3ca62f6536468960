"""A final softmax/sigmoid recognised from the ``torch`` calls a layer makes as it runs, and the
values before it taken in the same run (PyTorch; imported only there).

The layer's call runs under :class:`_Recording`, a ``torch.overrides.TorchFunctionMode`` that
notes every squash (``softmax`` over the last axis, ``sigmoid``: what ``keras.activations`` and
``keras.ops`` call on PyTorch) and every operation that keeps values (reshapes, squeezes, casts,
copies) with the tensor it read. The output *ends in a squash* when, walking back from it through
the value-keeping operations, the walk meets a squash's output, or a softmax or sigmoid written
out in operations (``exp(a) / Σ exp(a)`` over the last axis, ``a`` possibly minus its maximum;
``1 / (1 + exp(-a))``), as on the other backends. :func:`eager_or_traced` runs the call the same
way and applies the value-keeping operations after the squash to the squash's input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["traced_squash", "eager_or_traced"]

_SIGMOIDS = (torch.sigmoid, F.sigmoid, torch.Tensor.sigmoid)
_SOFTMAXES = (torch.softmax, F.softmax, torch.Tensor.softmax)
_SAME_VALUES = (
    torch.reshape, torch.Tensor.reshape, torch.Tensor.view, torch.squeeze, torch.Tensor.squeeze,
    torch.unsqueeze, torch.Tensor.unsqueeze, torch.Tensor.to, torch.Tensor.type, torch.clone,
    torch.Tensor.clone, torch.Tensor.contiguous, torch.flatten, torch.Tensor.flatten,
)  # fmt: skip


_DIVIDE = ("div", "divide", "true_divide", "__truediv__", "__rtruediv__", "__div__", "__rdiv__")
_ADD = ("add", "__add__", "__radd__")
_NEGATE = ("neg", "negative", "__neg__")
_SUBTRACT = ("sub", "subtract", "__sub__")


class _Recording(TorchFunctionMode):
    """Notes squashes and value-keeping operations, ``made[id(out)] = (out, kind, func, args,
    kwargs)``, and every other call, ``calls[id(out)] = (out, name, args, kwargs)``."""

    def __init__(self) -> None:
        super().__init__()
        self.made: dict = {}
        self.calls: dict = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or not args or not isinstance(args[0], torch.Tensor):
            return out
        if func in _SIGMOIDS:
            self.made[id(out)] = (out, "sigmoid", func, args, kwargs)
        elif func in _SOFTMAXES and _last_axis(args, kwargs, out.ndim):
            self.made[id(out)] = (out, "softmax", func, args, kwargs)
        elif func in _SAME_VALUES and (out.dtype.is_floating_point or not args[0].dtype.is_floating_point):
            self.made[id(out)] = (out, "same", func, args, kwargs)
        else:
            self.calls[id(out)] = (out, getattr(func, "__name__", ""), args, kwargs)
        return out

    def _is_one(self, value: Any) -> bool:
        """Whether ``value`` is the constant 1 (a number, or a tensor of ones the call did not compute)."""
        if isinstance(value, (int, float)):
            return float(value) == 1.0
        computed = id(value) in self.calls or id(value) in self.made
        return isinstance(value, torch.Tensor) and not computed and bool((value == 1).all())

    def _call(self, value: Any, names: tuple) -> tuple | None:
        """``(args, kwargs)`` of the call among ``names`` that made ``value`` (looking past
        value-keeping calls: a conversion, a copy), else ``None``."""
        while isinstance(value, torch.Tensor):
            kept = self.made.get(id(value))
            if kept is None or kept[0] is not value or kept[1] != "same" or kept[3][0] is value:
                break
            value = kept[3][0]
        entry = self.calls.get(id(value)) if isinstance(value, torch.Tensor) else None
        if entry is None or entry[0] is not value or entry[1] not in names:
            return None
        return entry[2], entry[3]

    def by_hand(self, value: Any) -> tuple[str, Any] | None:
        """``(squash, its input)`` when ``value`` ends a softmax or sigmoid written out in calls."""
        entry = self.calls.get(id(value)) if isinstance(value, torch.Tensor) else None
        if entry is None or entry[0] is not value or entry[1] not in _DIVIDE:
            return None
        args = entry[2]
        numerator, denominator = (args[1], args[0]) if entry[1] in ("__rtruediv__", "__rdiv__") else args[:2]
        if self._is_one(numerator):
            total = self._call(denominator, _ADD)
            parts = [v for v in total[0] if not self._is_one(v)] if total else []
            exp = self._call(parts[0], ("exp",)) if len(parts) == 1 else None
            negated = self._call(exp[0][0], _NEGATE) if exp else None
            return ("sigmoid", negated[0][0]) if negated else None
        exp, summed = self._call(numerator, ("exp",)), self._call(denominator, ("sum",))
        if exp is None or summed is None or self._call(summed[0][0], ("exp",)) is None:
            return None
        axis = summed[1].get("dim", summed[1].get("axis", summed[0][1] if len(summed[0]) > 1 else None))
        axis = axis[0] if isinstance(axis, (tuple, list)) and len(axis) == 1 else axis
        if axis is None or int(axis) not in (-1, numerator.ndim - 1):
            return None
        logits = self._unshifted(exp[0][0])
        if self._unshifted(self._call(summed[0][0], ("exp",))[0][0]) is not logits:  # type: ignore[index]
            return None
        return "softmax", logits

    def _unshifted(self, value: Any) -> Any:
        """``a`` for ``a - max(a)`` over the last axis (the stable softmax's shift), else ``value``."""
        shifted = self._call(value, _SUBTRACT)
        if shifted is None:
            return value
        peak = self._call(shifted[0][1], ("max", "amax"))
        return shifted[0][0] if peak is not None and peak[0][0] is shifted[0][0] else value

    def chain(self, output: Any) -> tuple[str, Any, list] | None:
        """``(squash, its input, the value-keeping calls after it, innermost first)`` for ``output``."""
        after: list = []
        current = output
        while True:
            entry = self.made.get(id(current)) if isinstance(current, torch.Tensor) else None
            if entry is None or entry[0] is not current:
                found = self.by_hand(current)
                return None if found is None else (found[0], found[1], after[::-1])
            _, kind, func, args, kwargs = entry
            if kind != "same":
                return kind, args[0], after[::-1]
            after.append((func, args, kwargs))
            current = args[0]


def _last_axis(args: tuple, kwargs: dict, rank: int) -> bool:
    axis = kwargs.get("dim", kwargs.get("axis", args[1] if len(args) > 1 else None))
    return axis is not None and int(axis) in (-1, rank - 1)


def traced_squash(call: Callable, specs: Sequence[tuple], variables: Sequence[Any] = ()) -> tuple[str, str] | None:
    """``("traced", squash)`` when ``call(*inputs)``'s single output ends in a softmax/sigmoid, else
    ``None``; the call runs once on zeros of ``specs`` (``(shape, dtype)``, an unknown size taken
    as 2). ``variables`` is accepted for the other backends' signature."""
    import keras

    args = [keras.ops.zeros(tuple(2 if s is None else int(s) for s in shape), dtype) for shape, dtype in specs]
    recording = _Recording()
    try:
        with torch.no_grad(), recording:
            out = call(*args)
    except Exception:  # noqa: BLE001 - a layer that cannot run on zeros: not recognised
        return None
    found = recording.chain(out) if isinstance(out, torch.Tensor) else None
    return None if found is None else ("traced", found[0])


def eager_or_traced(call: Callable, variables: Sequence[Any] = ()) -> Callable:
    """``run(*args) -> values``: ``call(*args)``'s values before its final softmax/sigmoid, passed
    through the value-keeping operations after it (``ValueError`` when the output does not end
    in one)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        recording = _Recording()
        with recording:
            out = call(*args, **kwargs)
        found = recording.chain(out) if isinstance(out, torch.Tensor) else None
        if found is None:
            raise ValueError(
                "the final softmax/sigmoid found when the model was first traced is not there when it "
                "runs; use score='output'; received an output that does not end in one."
            )
        _, values, after = found
        for func, call_args, call_kwargs in after:
            values = func(values, *call_args[1:], **call_kwargs)
        return values

    return run
