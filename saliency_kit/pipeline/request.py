"""What :func:`saliency_kit.explain` and its multi-input driver share: targets resolved once
with the forward pass they need, the options an Explanation records, what was differentiated,
the request a method's ``prepare`` sees, and the noise keys of the inputs."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine, methods
from .. import targets as targets_module

if TYPE_CHECKING:
    import keras

    from .layer_start import LayerStart

__all__ = [
    "ExplainCall",
    "resolve_request",
    "method_request",
    "recorded_options",
    "differentiated_score",
    "check_input_keys",
    "KEY_LIMIT",
]


@dataclass(frozen=True, eq=False)
class ExplainCall:
    """One call of :func:`saliency_kit.explain`, its arguments as given (the drivers check them).

    ``method`` as given (a name) and ``chosen`` the method it names; ``options`` the method's
    options; ``points``: the explained parts' values when they are not the inputs' own (one array
    ``[B, *part.shape]`` per part: ``sk.evaluate``'s robustness metrics explain token ids at
    perturbed points of their embedding space); ``layer_start`` checked
    (:func:`~saliency_kit.pipeline.layer_start.check_layer_start`); the rest as
    :func:`saliency_kit.explain` takes them.
    """

    model: Any
    inputs: Any
    method: Any
    chosen: Any
    targets: Any = "top1"
    score: str = "logits"
    batch_size: int = 32
    class_names: Any = None
    input_keys: Any = None
    channels_axis: int | None = None
    attribute_to: Any = None
    baseline_token: int = 0
    with_scores: bool = True
    options: dict = field(default_factory=dict)
    points: list | None = None
    layer_start: LayerStart = "baseline"


def resolve_request(
    model: keras.Model,
    x: Any,
    targets: Any,
    score: str,
    batch_size: int,
    class_names: Sequence[str] | None,
    at: Any = None,
    method: methods.Method | None = None,
) -> targets_module.Resolved:
    """Any form of ``targets`` as one target object (:func:`saliency_kit.targets.as_target`)
    resolved for the checked inputs ``x`` ``[B, ...]``: ``Resolved(columns int [B, K], payload,
    info, bound target, vectors)``. ``at``: what the model runs on when it is not ``x`` (a
    multi-input model's inputs, a list); ``method``: the method the targets are resolved for
    (:attr:`saliency_kit.targets.TargetRequest.method`)."""
    at = x if at is None else at
    request = targets_module.TargetRequest(
        model,
        x,
        score,
        batch_size,
        class_names,
        forward=lambda strip: engine.outputs(model, at, score=score, batch_size=batch_size, strip=strip),
        method=method,
    )
    resolved = targets_module.as_target(targets).resolve(request)
    columns = np.asarray(resolved.columns)
    if columns.ndim != 2 or columns.shape[0] != len(x) or columns.shape[1] < 1 or columns.dtype.kind not in "iu":
        raise ValueError(
            f"a target's resolve() must give int columns [{len(x)}, K]; received {columns.dtype} {columns.shape}."
        )
    resolved.columns = columns.astype(np.int64)
    return resolved


def method_request(
    model: keras.Model, x: np.ndarray, score: str, batch_size: int, class_names: Any, channel_axis: int
) -> methods.Request:
    """The request a method's ``prepare`` checks its options against (``x``: the points explained)."""
    default_layer = getattr(class_names, "gradcam_layer", None)
    return methods.Request(model, x, None, score, batch_size, default_layer=default_layer, channel_axis=channel_axis)


def differentiated_score(model: keras.Model, score: str) -> str:
    """What the gradients were of: ``score``, or ``"output"`` when ``score="logits"`` was asked of
    a model whose final softmax/sigmoid cannot be looked behind (the engine's view warned once)."""
    return engine.score_view(model, score).differentiated


def _scalar(value: Any) -> bool:
    """A number (or 0-d array); ragged lists (XRAI's segments per input) are not."""
    return isinstance(value, numbers.Number) or (isinstance(value, np.ndarray) and value.ndim == 0)


def recorded_options(given: dict, prepared: dict) -> dict:
    """The options an Explanation records: prepared values, but scalars the user gave stay scalars
    and a per-input option given in the inputs' structure (a list, tuple or dict) stays as given."""

    def as_given(name: str, value: Any) -> bool:
        if not isinstance(value, np.ndarray) or name not in given:
            return False
        return _scalar(given[name]) or isinstance(given[name], (list, tuple, dict))

    return {name: given[name] if as_given(name, value) else value for name, value in prepared.items()}


#: Noise keys (``explain(..., input_keys=)``) lie in ``[0, KEY_LIMIT)``.
KEY_LIMIT = 2**31


def check_input_keys(input_keys: Any, count: int) -> np.ndarray | None:
    """``input_keys`` as int64 ``[count]`` (or ``None``): ``TypeError`` unless integers,
    ``ValueError`` unless ``count`` of them in ``[0, 2**31)``."""
    if input_keys is None:
        return None
    if isinstance(input_keys, (str, bytes)):
        raise TypeError(f"input_keys must be a sequence of ints, one per input; received {input_keys!r}.")
    try:
        keys = np.asarray(input_keys)
    except Exception:
        raise TypeError(
            f"input_keys must be a sequence of ints, one per input; received {type(input_keys).__name__}."
        ) from None
    if keys.size and (not np.issubdtype(keys.dtype, np.integer) or keys.dtype == np.bool_):
        raise TypeError(f"input_keys must be a sequence of ints, one per input; received dtype {keys.dtype}.")
    if keys.shape != (count,):
        raise ValueError(f"input_keys must hold one int per input ({count}); received shape {keys.shape}.")
    if count and (keys.min() < 0 or keys.max() >= KEY_LIMIT):
        raise ValueError(f"input_keys must lie in [0, 2**31); received values from {keys.min()} to {keys.max()}.")
    return keys.astype(np.int64)
