"""Taps on inner layers: which call of a layer a tap takes, and the recording of it while a
model's graph runs (:class:`~saliency_kit.model.scores.ScoreView` runs the graph).

A layer called once is tapped by its path (``"outer/inner"``). A layer called more than once (a
siamese branch applied to two inputs) has one output per call: a :class:`Tap` names the call that
one model input reaches, found by following, call by call as the graph runs, which model inputs
each tensor depends on (:class:`Reach`). A tap that matches two calls is refused, never resolved
to whichever ran last.

A layer inside a custom layer (a KerasHub transformer block's layer norm) is no node of any
graph: :func:`inside` records it while the custom layer runs, by an intercept on its class that
acts only on the layers tapped, in the recording thread, and is removed when the call returns
(the model and its layers are never modified).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras

from .model_inputs import model_inputs
from .walker import children, walk

__all__ = ["Tap", "Reach", "path_of", "recording", "not_reached", "inside"]


@dataclass(frozen=True)
class Tap:
    """The call of the layer at ``path`` (``"outer/inner"``) that model input ``input`` (its index
    in graph order) reaches."""

    path: str
    input: int


def path_of(tap: str | Tap) -> str:
    return tap.path if isinstance(tap, Tap) else tap


class Reach:
    """Which model inputs each tensor of one run of a model depends on, followed call by call as
    the graph runs (``{id(tensor): (tensor, input indices)}``; the tensor is held so that its id
    is not reused while the run lasts). ``inputs``: the model's inputs in graph order."""

    def __init__(self, inputs: list):
        self._of: dict[int, tuple[Any, frozenset]] = {}
        for index, tensor in enumerate(inputs):
            self.mark(tensor, frozenset({index}))

    def of(self, values: Any) -> frozenset:
        """The inputs any tensor among ``values`` (any structure) depends on."""
        found: frozenset = frozenset()
        for value in keras.tree.flatten(values):
            known = self._of.get(id(value))
            if known is not None and known[0] is value:
                found |= known[1]
        return found

    def mark(self, values: Any, inputs: frozenset) -> None:
        """Every tensor among ``values`` depends on ``inputs`` (and on what it did already)."""
        for value in keras.tree.flatten(values):
            known = self._of.get(id(value))
            if known is not None and known[0] is value:
                inputs = inputs | known[1]
            self._of[id(value)] = (value, inputs)


def recording(
    fn: Callable,
    keys: list,
    taken: dict,
    reach: Reach | None,
    model: keras.Model,
    shifts: dict | None = None,
    reached: frozenset = frozenset(),
) -> Callable:
    """``fn`` (one layer's call in ``model``'s graph) that also puts its output in ``taken[key]``
    for each tap ``key`` among ``keys`` it matches (a path: every call; a :class:`Tap`: a call its
    input reaches), refusing a second match, and follows ``reach`` through the call. A matched
    key in ``shifts`` adds ``shifts[key]`` (zeros of the output's shape) to what the call gives
    the rest of the graph and to what is taken (a target reading the same layer reads it
    shifted): the gradient with respect to that shift is the gradient with respect to the
    layer's output, on any backend. Without ``reach``, the call is on the paths of the model
    inputs ``reached``."""
    if not keys and reach is None:
        return fn
    shifts = shifts or {}

    def record(*args: Any, **kwargs: Any) -> Any:
        came = reach.of((args, kwargs)) if reach is not None else reached
        out = fn(*args, **kwargs)
        if reach is not None:
            reach.mark(out, came)
        for key in keys:
            if isinstance(key, Tap) and key.input not in came:
                continue  # a call on another input's path
            if key in taken:
                raise ValueError(_several_calls(model, key))
            if key in shifts:
                out = out + shifts[key]
            taken[key] = out
        return out

    return record


def _input_name(model: keras.Model, index: int) -> str:

    names = [info.name for info in model_inputs(model)]
    return names[index] if 0 <= index < len(names) else f"input_{index}"


def _several_calls(model: keras.Model, tap: str | Tap) -> str:
    """Why a tap on a layer called more than once has no one output."""
    if isinstance(tap, Tap):
        return (
            f"layer {tap.path!r} is called more than once on the path from input {_input_name(model, tap.input)!r} "
            f"of model {model.name!r} (a shared layer applied twice to what that input feeds), so which "
            "call's activations to explain is ambiguous; choose a layer called once on that path with layer=."
        )
    return (
        f"layer {tap!r} is called more than once in model {model.name!r} (a shared layer), so its "
        "activations are not one tensor; choose a layer called once (a CAM method explaining a model's "
        "several inputs takes each input's own call)."
    )


def not_reached(model: keras.Model, tap: str | Tap) -> str:
    """Why a tap recorded nothing."""
    if isinstance(tap, Tap):
        return (
            f"layer {tap.path!r} is on no path from input {_input_name(model, tap.input)!r} of model "
            f"{model.name!r}, so its activations are not of that input; choose a layer after that input with layer=."
        )
    return f"layer {tap!r} was not reached when running the model."


_LOCK = threading.RLock()
_ACTIVE = threading.local()  # .calls: {id(layer): its call while tapped}


def inside(
    op: Any,
    fn: Callable,
    taps: tuple,
    swaps: dict,
    taken: dict,
    reach: Reach | None,
    model: keras.Model,
    shifts: dict | None,
    where: str,
) -> Callable:
    """``fn`` (the call of ``op``, a custom layer at path ``where`` of ``model``) with the layers
    inside it recorded: ``taps`` ``((names below op), key)`` as :func:`recording` does, ``swaps``
    ``{(names below op): tensor}`` returning that tensor instead of running the layer. A layer
    run in a loop (inside a recurrent layer or a wrapper) is refused, as is a name not inside
    ``op`` (the message lists the paths that are)."""
    if isinstance(op, (keras.layers.RNN, keras.layers.Wrapper)):
        path = f"{where}/{'/'.join(taps[0][0] if taps else next(iter(swaps)))}"
        raise ValueError(
            f"layer {path!r} is inside {op.name!r} ({type(op).__name__}), which runs it once per step or slice: "
            f"only layers run once per call can be tapped; tap {where!r} itself; received {path!r}."
        )
    plan: dict[int, list] = {}  # id(layer) -> [layer, keys, swapped]
    for parts, key in taps:
        layer = _below(op, parts, where)
        plan.setdefault(id(layer), [layer, [], None])[1].append(key)
    for parts, value in swaps.items():
        layer = _below(op, parts, where)
        plan.setdefault(id(layer), [layer, [], None])[2] = value

    def run(*args: Any, **kwargs: Any) -> Any:
        came = reach.of((args, kwargs)) if reach is not None else frozenset()
        calls = {}
        for key, (layer, keys, swapped) in plan.items():
            original = _class_call(layer)
            call = original if swapped is None else (lambda *a, swapped=swapped, **k: swapped)
            calls[key] = recording(call, keys, taken, None, model, shifts, came)
        with _Intercepted(plan, calls):
            out = fn(*args, **kwargs)
        if reach is not None:
            reach.mark(out, came)
        return out

    return run


def _below(op: Any, parts: tuple, where: str) -> Any:
    """The layer at ``parts`` (names) below ``op``; ``ValueError`` listing the paths there."""
    layer = op
    for name in parts:
        found = [child for child in children(layer) if getattr(child, "name", None) == name]
        if len(found) != 1:
            paths = [visit.path for visit in walk(op, prefix=f"{where}/")]
            path = f"{where}/{'/'.join(parts)}"
            raise ValueError(
                f"no single layer {path!r} inside {op.name!r} ({type(op).__name__}); the layers inside it: "
                f"{paths or 'none'}; received {path!r}."
            )
        layer = found[0]
    return layer


def _class_call(layer: Any) -> Callable:
    """``layer.call`` as its class defines it (an intercept looked behind), bound to ``layer``."""
    call = type(layer).call
    return getattr(call, "__wrapped__", call).__get__(layer)


class _Intercepted:
    """Within the block, each layer of ``plan`` (in this thread) runs ``calls[id(layer)]`` in place
    of its class's ``call``; other instances of those classes, and other threads, run as ever."""

    def __init__(self, plan: dict, calls: dict):
        self.classes = {type(layer) for layer, _, _ in plan.values()}
        self.calls = calls
        self.saved: dict = {}

    def __enter__(self) -> None:
        _LOCK.acquire()
        active = getattr(_ACTIVE, "calls", None)
        _ACTIVE.calls = {**(active or {}), **self.calls}
        self.outer = active
        for cls in self.classes:
            if getattr(cls.call, "_saliency_intercept", False):
                continue
            self.saved[cls] = cls.__dict__.get("call")
            cls.call = _intercept(cls.call)

    def __exit__(self, *exc: Any) -> None:
        try:
            for cls, own in self.saved.items():
                if own is None:
                    del cls.call
                else:
                    cls.call = own
            _ACTIVE.calls = self.outer
        finally:
            _LOCK.release()


def _intercept(original: Callable) -> Callable:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls = getattr(_ACTIVE, "calls", None) or {}
        if id(self) in calls:
            return calls[id(self)](*args, **kwargs)
        return original(self, *args, **kwargs)

    call._saliency_intercept = True  # type: ignore[attr-defined]
    call.__wrapped__ = original  # type: ignore[attr-defined]
    return call
