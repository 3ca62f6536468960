"""Op-level backward rules on PyTorch: every ReLU-family operation a function runs differentiates
by a rule, through a function mode active while it runs.

:func:`with_rule` wraps ``fn`` so that it runs under :class:`_RuleMode`, a
``torch.overrides.TorchFunctionMode``: PyTorch hands the mode every ``torch`` function the code
calls (Keras' layers included, at any depth: custom ``call`` methods, Lambdas, wrappers, subclassed
models), and the mode replaces each ReLU-family call by a ``torch.autograd.Function`` whose forward
pass is that call itself (the same values, bit for bit) and whose backward pass is
``rule.grad(x, y, dy)``, the rule bound to the activation::

    wrapped, report = with_rule(lambda x: model(x, training=False), "guided")
    y = wrapped(x)               # the model's own outputs
    torch.autograd.grad(y[:, 3].sum(), x)    # the guided gradient

What Keras 3 runs on PyTorch, and what is taken over (``x`` the activation's input):

- ``torch.nn.functional.relu`` / ``torch.relu`` / ``Tensor.relu`` (``keras.ops.relu``, fused
  ``activation="relu"``, ``keras.layers.ReLU()``, ``Activation("relu")``);
- ``torch.nn.functional.relu6`` (``relu6``, ``ReLU(max_value=6)``);
- ``torch.nn.functional.leaky_relu(x, slope)`` (``LeakyReLU``, ``ReLU(negative_slope=a)``);
- activations of several calls, taken over as one: a rule-carrying activation then
  ``clip``/``clamp``(·, 0, m) or ``minimum``(·, m) (a ``max_value`` other than 6);
  ``where(x > t, x, 0)`` (a ``threshold``), possibly clipped after; and Keras' leaky composite
  ``pos(x) − a · relu(−x [+ t])`` (``negative_slope`` with ``max_value`` or ``threshold``).

A PReLU (``relu(x) − α · relu(−x)`` with a learned ``α``) is no member of the family: its ReLUs keep
their plain gradient and are listed in ``report.plain``, as at the layer level. A clip whose bounds
are not constants is reported (``report.unsupported``). Nothing global
changes and the model is never touched: the mode exists only while ``wrapped`` runs, so the
original function and its gradients stay plain, before, after and at the same time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import keras
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..model.keras_private import running_layers
from ..rules import ModifiedBackprop, ReluFamily, as_rule
from ..rules.coverage import FamilyCoverage

__all__ = ["RuleReport", "with_rule"]

_RELU = (F.relu, torch.relu, torch.Tensor.relu)
_CLIPS = (torch.clip, torch.clamp, torch.Tensor.clip, torch.Tensor.clamp)
_MINIMUMS = (torch.minimum, torch.Tensor.minimum)
_GREATER = (torch.greater, torch.gt, torch.Tensor.__gt__, torch.Tensor.gt)
_WHERE = (torch.where,)
_NEGATE = (torch.neg, torch.negative, torch.Tensor.__neg__, torch.Tensor.neg)
_ADD = (torch.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.Tensor.add)
_MULTIPLY = (torch.multiply, torch.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.Tensor.mul)
_SUBTRACT = (
    torch.subtract, torch.sub, torch.Tensor.__sub__, torch.Tensor.__isub__, torch.Tensor.sub, torch.Tensor.sub_,
)  # fmt: skip


@dataclasses.dataclass
class RuleReport(FamilyCoverage):
    """What :func:`with_rule`'s wrapped function took over, refilled at each call: ``ops`` are
    readable lines (``"relu at model/dense"``), ``families`` the
    :class:`~saliency_kit.rules.ReluFamily` of each in the same order."""

    WHERE: ClassVar[str] = "with constant parameters"


def with_rule(fn: Callable, rule: Any) -> tuple[Callable, RuleReport]:
    """``(wrapped, report)``: ``wrapped(*args)`` computes ``fn(*args)`` exactly, and its gradients
    (``torch.autograd.grad``, ``backward``) apply ``rule`` at every ReLU-family operation ``fn`` runs.

    Args:
        fn: a function of tensors running ``torch`` operations (a Keras model's call).
        rule: ``"guided"``, ``"deconv"`` or a :class:`~saliency_kit.ModifiedBackprop` instance.

    Returns:
        ``wrapped`` (same signature and outputs as ``fn``) and its :class:`RuleReport`, refilled at
        each call (empty when ``fn`` runs no ReLU-family operation).
    """
    rule = as_rule(rule)
    report = RuleReport(rule)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        report.clear()
        with _RuleMode(rule, report):
            return fn(*args, **kwargs)

    return wrapped, report


class _Ruled(torch.autograd.Function):
    """``y`` (computed by the activation's own calls) with ``rule.grad(x, y, dy)`` as its gradient
    with respect to ``x``."""

    @staticmethod
    def forward(ctx: Any, x: Any, y: Any, rule: ModifiedBackprop) -> Any:
        ctx.save_for_backward(x, y)
        ctx.rule = rule
        return y.clone()

    @staticmethod
    def backward(ctx: Any, dy: Any) -> tuple:
        x, y = ctx.saved_tensors
        return ctx.rule.grad(x, y, dy), None, None


@dataclasses.dataclass(frozen=True)
class _Made:
    """What a tensor the mode made is: ``kind`` ``"activation"`` (a rule-carrying activation of
    ``x``), ``"above"`` (``x > threshold``), ``"negated"`` (``threshold − x``), ``"negative part"``
    (``relu(threshold − x)``, times ``slope``)."""

    kind: str
    x: Any
    family: ReluFamily | None = None
    threshold: float = 0.0
    slope: float = 1.0


def _constant(value: Any) -> float | None:
    """The one number ``value`` holds (a Python number, or a tensor outside autograd whose every
    element is equal), else ``None``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor) and not value.requires_grad and value.numel() >= 1 and not value.is_complex():
        flat = value.detach().reshape(-1)
        if bool((flat == flat[0]).all()):
            return float(str(flat[0].cpu().numpy()))  # float32 0.1 -> 0.1, as written
    return None


class _RuleMode(TorchFunctionMode):
    """Replaces ReLU-family calls by rule-carrying ones while active (see the module's docstring)."""

    def __init__(self, rule: ModifiedBackprop, report: RuleReport) -> None:
        super().__init__()
        self.rule = rule
        self.report = report
        self.made: dict = {}  # id(tensor) -> (tensor, _Made): tensors compare by value, not identity

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not isinstance(out, torch.Tensor):
            return out
        return self._ruled(func, args, kwargs, out)

    def _made(self, value: Any) -> _Made | None:
        entry = self.made.get(id(value)) if isinstance(value, torch.Tensor) else None
        return entry[1] if entry is not None and entry[0] is value else None

    def _mark(self, tensor: Any, made: _Made) -> None:
        self.made[id(tensor)] = (tensor, made)  # kept alive while the mode is: ids stay unique

    def _activation(self, x: Any, y: Any, family: ReluFamily, replaces: Any = None) -> Any:
        """``y`` with the rule bound to ``family`` as its gradient at ``x``; ``replaces``: the
        activation it extends (a clip after a ReLU), whose report entry it takes over."""
        if replaces is not None and replaces.family is not None:
            index = len(self.report.families) - 1 - self.report.families[::-1].index(replaces.family)
            del self.report.ops[index], self.report.families[index]
        ruled = _Ruled.apply(x, y.detach(), self.rule.bind(family))
        self._mark(ruled, _Made("activation", x, family))
        self.report.took(family, _where())
        return ruled

    def _ruled(self, func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
        first = args[0] if args else None
        if func in _RELU and isinstance(running_layers()[1], keras.layers.PReLU):
            entry = f"prelu at {_where()}"  # its learned slope: no member of the family
            if entry not in self.report.plain:
                self.report.plain.append(entry)
            return out
        if func in _RELU:
            ruled = self._activation(first, out, ReluFamily())
            negated = self._made(first)
            if negated is not None and negated.kind == "negated":  # perhaps the negative part of a leaky one
                self._mark(ruled, _Made("negative part", negated.x, threshold=negated.threshold))
            return ruled
        if func is F.relu6:
            return self._activation(first, out, ReluFamily(max_value=6.0))
        if func is F.leaky_relu:
            slope = kwargs.get("negative_slope", args[1] if len(args) > 1 else 0.01)
            return self._activation(first, out, ReluFamily(negative_slope=float(slope)))
        if func in _CLIPS or func in _MINIMUMS:
            return self._capped(func, args, kwargs, out)
        if func in _GREATER:
            threshold = _constant(args[1] if len(args) > 1 else kwargs.get("other"))
            if threshold is not None and isinstance(first, torch.Tensor):
                self._mark(out, _Made("above", first, threshold=threshold))
            return out
        if func in _WHERE and len(args) == 3:
            above = self._made(args[0])
            if above is not None and above.kind == "above" and args[1] is above.x and _constant(args[2]) == 0.0:
                return self._activation(above.x, out, ReluFamily(threshold=above.threshold))
            return out
        return self._leaky_parts(func, args, out)

    def _capped(self, func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
        """A clip or minimum of a rule-carrying activation: the activation with that cap."""
        inner = self._made(args[0] if args else None)
        other = args[1] if len(args) > 1 else kwargs.get("other")
        if func in _MINIMUMS and (inner is None or inner.kind != "activation"):
            inner, other = self._made(other), args[0]  # minimum(cap, activation)
        if inner is None or inner.kind != "activation" or inner.family is None:
            return out
        low: float | None = 0.0
        if func in _MINIMUMS:
            high = _constant(other)
        else:
            low = _constant(args[1] if len(args) > 1 else kwargs.get("min"))
            high = _constant(args[2] if len(args) > 2 else kwargs.get("max"))
        family = inner.family
        if high is None or low not in (0.0, None) or family.max_value is not None or family.negative_slope:
            self.report.unsupported.append(
                f"{func.__name__} of {family.name} at {_where()}: its bounds are not constants a rule can be bound to"
            )
            return out
        return self._activation(inner.x, out, dataclasses.replace(family, max_value=high), replaces=inner)

    def _leaky_parts(self, func: Any, args: tuple, out: Any) -> Any:
        """Keras' leaky composite ``pos(x) − a · relu(−x [+ t])``, followed part by part."""
        if func in _NEGATE and len(args) == 1 and isinstance(args[0], torch.Tensor):
            self._mark(out, _Made("negated", args[0]))
            return out
        if len(args) != 2:
            return out
        a, b = (self._made(value) for value in args)
        if func in _ADD:
            negated = a if a is not None and a.kind == "negated" else b
            other = args[1] if negated is a else args[0]
            if negated is not None and negated.kind == "negated" and _constant(other) is not None:
                self._mark(out, _Made("negated", negated.x, threshold=negated.threshold + float(_constant(other) or 0)))
            return out
        if func in _MULTIPLY:
            part, other = (a, args[1]) if a is not None else (b, args[0])
            slope = _constant(other)
            if part is not None and part.kind == "negative part" and slope is not None:
                self._mark(out, dataclasses.replace(part, slope=part.slope * slope))
            return out
        if func in _SUBTRACT and a is not None and a.kind == "activation" and b is not None:
            if b.kind == "negative part" and b.x is a.x and a.family is not None:
                family = dataclasses.replace(a.family, negative_slope=b.slope)
                if family.threshold == b.threshold:
                    self._drop_negative_relu()
                    return self._activation(a.x, out, family, replaces=a)
        return out

    def _drop_negative_relu(self) -> None:
        """The ``relu(−x)`` of a leaky composite is part of it, not an activation of its own."""
        for index in range(len(self.report.ops) - 1, -1, -1):
            if self.report.families[index].is_plain:
                del self.report.ops[index], self.report.families[index]
                return


def _where() -> str:
    """The path of the layer running now (``"model/dense"``), or ``"top level"``."""
    return running_layers()[0] or "top level"
