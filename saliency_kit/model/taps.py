"""Taps on inner layers: which call of a layer a tap takes, and the recording of it while a
model's graph runs (:class:`~saliency_kit.model.scores.ScoreView` runs the graph).

A layer called once is tapped by its path (``"outer/inner"``). A layer called more than once (a
siamese branch applied to two inputs) has one output per call: a :class:`Tap` names the call that
one model input reaches, found by following, call by call as the graph runs, which model inputs
each tensor depends on (:class:`Reach`). A tap that matches two calls is refused, never resolved
to whichever ran last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras

from .model_inputs import model_inputs

__all__ = ["Tap", "Reach", "path_of", "recording", "not_reached"]


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
    fn: Callable, keys: list, taken: dict, reach: Reach | None, model: keras.Model, shifts: dict | None = None
) -> Callable:
    """``fn`` (one layer's call in ``model``'s graph) that also puts its output in ``taken[key]``
    for each tap ``key`` among ``keys`` it matches (a path: every call; a :class:`Tap`: a call its
    input reaches), refusing a second match, and follows ``reach`` through the call. A matched
    key in ``shifts`` adds ``shifts[key]`` (zeros of the output's shape) to what the call gives
    the rest of the graph and to what is taken (a target reading the same layer reads it
    shifted): the gradient with respect to that shift is the gradient with respect to the
    layer's output, on any backend."""
    if not keys and reach is None:
        return fn
    shifts = shifts or {}

    def record(*args: Any, **kwargs: Any) -> Any:
        came = reach.of((args, kwargs)) if reach is not None else frozenset()
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
