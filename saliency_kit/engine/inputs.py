"""The checks on what a request brings before the engine runs anything: the inputs against the
model's input signature, where the channels are (the input's, and its spatial layers'), and the
score asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import keras

__all__ = ["check_inputs", "check_array", "check_score", "channel_axis", "check_channels_axis", "layer_channel_axis"]


def check_score(score: str) -> None:
    """``score`` is ``"logits"`` or ``"output"``: else ``TypeError`` (not a string) or ``ValueError``."""
    if not isinstance(score, str):
        raise TypeError(f"score must be 'logits' or 'output'; received {score!r}.")
    if score not in ("logits", "output"):
        raise ValueError(f"score must be 'logits' or 'output'; received {score!r}.")


def check_inputs(model: keras.Model, inputs: Any) -> np.ndarray:
    """``inputs`` as a NumPy array in the model's input dtype, checked against the model.

    ``TypeError`` when ``model`` is not a Keras model or ``inputs`` are not floating point;
    ``ValueError`` for multi-input or unbuilt models, non-finite inputs and shapes that do not
    fit the model's input ``[B, ...]``.
    """
    from ..model.inspect import input_signature

    expected, dtype = input_signature(model)
    return check_array(inputs, expected, dtype, model.name)


def check_array(value: Any, expected: tuple, dtype: str, model_name: str, what: str = "inputs") -> np.ndarray:
    """One model input ``value`` checked against its ``expected`` shape ``(None, ...)`` and
    ``dtype`` (integer inputs — token ids, masks — take integers, the others floating point,
    finite values), as a contiguous array of ``dtype``. ``what`` names it in the errors
    (``"inputs"``, or ``"input 'meta'"`` for one of several)."""
    try:
        array = np.asarray(value)
    except Exception as err:
        raise TypeError(f"{what} could not be read as an array ({err}); received {type(value).__name__}.") from None
    integer = "int" in dtype or dtype == "bool"
    if integer and not (np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_):
        raise TypeError(f"{what} takes integers ({dtype}: token ids, a mask); received dtype {array.dtype}.")
    if not integer and not np.issubdtype(array.dtype, np.floating):
        raise TypeError(
            f"{what} must be floating point, already preprocessed for the model (expected "
            f"{dtype}); apply the model's preprocessing first; received dtype {array.dtype}."
        )
    if array.ndim != len(expected) or any(e is not None and e != r for e, r in zip(expected[1:], array.shape[1:])):
        want = "[B, " + ", ".join("?" if e is None else str(e) for e in expected[1:]) + "]"
        raise ValueError(f"{what} must have shape {want} for model {model_name!r}; received {array.shape}.")
    if array.shape[0] == 0:
        raise ValueError(
            f"{what} is empty: expected at least one input along the first axis; received shape {array.shape}."
        )
    if not integer and not np.all(np.isfinite(array)):
        raise ValueError(f"{what} must be finite; received NaN or infinite values.")
    return np.ascontiguousarray(array.astype(dtype, copy=False))


def channel_axis(model: keras.Model, inputs: np.ndarray, given: int | None = None) -> int:
    """The channel axis of one input of ``model``: ``-1`` channels-last, ``0`` channels-first.

    ``given`` is ``explain``'s ``channels_axis`` (an axis of ``inputs``, batch included: ``1`` or
    the last); else it is found from the model, following the graph through transposes when the
    model may move its input's axes (``ValueError`` where it cannot be told, or for a model
    mixing both formats)."""
    from ..model.inspect import channel_axis as detect

    if given is not None:
        return check_channels_axis(given, inputs.ndim)
    return detect(model, inputs.ndim - 1, inputs.shape[1:], inputs.dtype.name)


def check_channels_axis(given: Any, ndim: int) -> int:
    """``explain``'s ``channels_axis`` (an axis of ``[B, ...]`` inputs) as the channel axis of one
    input (``0`` or ``-1``); ``TypeError``/``ValueError`` for anything but ``1`` or the last axis."""
    if isinstance(given, bool) or not isinstance(given, (int, np.integer)):
        raise TypeError(
            f"channels_axis must be an int (1 for [B, C, H, W], -1 for [B, H, W, C]) or None; received {given!r}."
        )
    axis = int(given) % ndim if -ndim <= int(given) < ndim else None
    if axis == ndim - 1:
        return -1
    if axis == 1 and ndim >= 3:
        return 0
    raise ValueError(
        f"channels_axis must be 1 (inputs [B, C, H, W]) or -1 (inputs [B, H, W, C]) for inputs of "
        f"rank {ndim}; received {given!r}."
    )


def layer_channel_axis(model: keras.Model, inputs: np.ndarray) -> int:
    """The channel axis of ``model``'s spatial layers (where a CAM layer's channels are)."""
    from ..model.inspect import layer_channel_axis as detect

    return detect(model, inputs.ndim - 1)
