"""The attention probabilities a model's attention layers compute, read while the model runs.

Every ``keras.layers.MultiHeadAttention`` (KerasHub's attention layers subclass it) computes its
probabilities ``[B, heads, T, S]`` after its softmax, before they weight the values.
:func:`attention_recording` intercepts those two steps for the layers of one model while a
function is traced: each call takes the layer's own explicit path (the probabilities formed, as
with ``return_attention_scores=True``), its probabilities are recorded in call order, and a zero
``shift`` of their shape may be added where they weight the values, so that the gradient with
respect to the shift is the gradient with respect to the probabilities on any backend. The model
and its layers are never modified: the intercept sits on the class, acts only on the layers of
the model being recorded and in the recording thread, and is removed on leaving.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import keras

from .keras_private import all_sublayers, attention_steps_overridden, attention_steps_replaced, attention_uses_flash

__all__ = ["attention_layers", "attention_recording", "no_attention"]

_LOCK = threading.RLock()
_ACTIVE = threading.local()


def attention_layers(model: keras.Model) -> list:
    """The ``keras.layers.MultiHeadAttention`` layers (subclasses included) inside ``model`` at
    any depth (nested models, custom blocks); ``ValueError`` for one whose class computes its
    attention its own way (it overrides the steps read)."""
    found = [layer for layer in [model, *all_sublayers(model)] if isinstance(layer, keras.layers.MultiHeadAttention)]
    for layer in found:
        own = attention_steps_overridden(layer)
        if own:
            raise ValueError(
                f"attention layer {layer.name!r} ({type(layer).__name__}) computes its attention its own way "
                f"(it overrides {', '.join(own)}), so its probabilities cannot be read."
            )
    return found


def no_attention(method: str) -> str:
    """Why ``method`` refuses a model without attention layers."""
    return (
        f"{method} needs a model with attention layers (keras.layers.MultiHeadAttention or a subclass, "
        "as in KerasHub's transformers); this model has none."
    )


class _Recorder:
    """The probabilities recorded so far, and the shifts to add to them (one per call, in order)."""

    def __init__(self, layers: list, shifts: Sequence | None):
        self.layers = {id(layer) for layer in layers}
        self.shifts = None if shifts is None else list(shifts)
        self.taken: list = []
        self.softmax_of: Any = None  # the layer whose attention is being computed

    def softmax(self, layer: Any, probabilities: Any) -> Any:
        """The probabilities of ``layer``'s call, recorded (and shifted)."""
        if self.softmax_of is not layer:
            return probabilities
        self.softmax_of = None
        if self.shifts is not None:
            index = len(self.taken)
            if index >= len(self.shifts):
                raise ValueError(f"the model ran more attention calls than the {len(self.shifts)} traced before.")
            probabilities = probabilities + keras.ops.cast(self.shifts[index], probabilities.dtype)
        self.taken.append(probabilities)
        return probabilities


def _recorder(layer: Any) -> _Recorder | None:
    recorder = getattr(_ACTIVE, "recorder", None)
    return recorder if recorder is not None and id(layer) in recorder.layers else None


def _intercepted(compute: Callable, masked_softmax: Callable) -> tuple[Callable, Callable]:
    """The two steps, recording the probabilities of the layers being recorded."""

    def compute_attention(self: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _recorder(self)
        if recorder is None:
            return compute(self, query, key, value, *args, **kwargs)
        if attention_uses_flash(self):
            raise ValueError(
                f"attention layer {self.name!r} runs flash attention, which never forms the attention "
                "probabilities; build the model with flash attention off to read them."
            )
        if len(args) > 2:  # (attention_mask, training, return_attention_scores, ...) positionally
            args = (*args[:2], True, *args[3:])
        else:
            kwargs["return_attention_scores"] = True  # the explicit path: the probabilities formed
        recorder.softmax_of = self
        try:
            return compute(self, query, key, value, *args, **kwargs)
        finally:
            recorder.softmax_of = None

    def softmax(self: Any, *args: Any, **kwargs: Any) -> Any:
        probabilities = masked_softmax(self, *args, **kwargs)
        recorder = _recorder(self)
        return probabilities if recorder is None else recorder.softmax(self, probabilities)

    return compute_attention, softmax


@contextmanager
def attention_recording(model: keras.Model, shifts: Sequence | None = None) -> Iterator[list]:
    """Within the block, every attention call of ``model``'s layers (in this thread) appends its
    probabilities ``[B, heads, T, S]`` to the list yielded, in call order; ``shifts`` (zeros of
    each call's probabilities' shape, in call order) are added to them where the layer uses them.
    ``ValueError`` (:func:`no_attention`) when the model has no attention layer."""
    layers = attention_layers(model)
    if not layers:
        raise ValueError(no_attention("reading attention probabilities"))
    with _LOCK:
        if getattr(_ACTIVE, "recorder", None) is not None:
            raise RuntimeError("attention probabilities are already being recorded in this thread.")
        recorder = _Recorder(layers, shifts)
        _ACTIVE.recorder = recorder
        try:
            with attention_steps_replaced(_intercepted):
                yield recorder.taken
        finally:
            _ACTIVE.recorder = None
