"""A final softmax/sigmoid recognised from the ``torch`` calls a layer makes as it runs, and the
values before it taken in the same run (PyTorch; imported only there).

The layer's call runs under :class:`_Recording`, a ``torch.overrides.TorchFunctionMode`` that
notes every squash (``softmax`` over the last axis, ``sigmoid``: what ``keras.activations`` and
``keras.ops`` call on PyTorch) and every operation that keeps values (reshapes, squeezes, casts,
copies) with the tensor it read. The output *ends in a squash* when, walking back from it through
the value-keeping operations, the walk meets a squash's output. :func:`eager_or_traced` runs the
call the same way and applies the value-keeping operations after the squash to the squash's
input. A softmax written out in operations is not recognised on PyTorch (the scores are then the
layer's outputs, as for any layer without a squash).
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


class _Recording(TorchFunctionMode):
    """Notes squashes and value-keeping operations: ``made[id(out)] = (out, kind, func, args, kwargs)``."""

    def __init__(self) -> None:
        super().__init__()
        self.made: dict = {}

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
        return out

    def chain(self, output: Any) -> tuple[str, Any, list] | None:
        """``(squash, its input, the value-keeping calls after it, innermost first)`` for ``output``."""
        after: list = []
        current = output
        while True:
            entry = self.made.get(id(current)) if isinstance(current, torch.Tensor) else None
            if entry is None or entry[0] is not current:
                return None
            _, kind, func, args, kwargs = entry
            if kind != "same":
                return kind, args[0], after[::-1]
            after.append((func, args, kwargs))
            current = args[0]


def _last_axis(args: tuple, kwargs: dict, rank: int) -> bool:
    axis = kwargs.get("dim", args[1] if len(args) > 1 else None)
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
