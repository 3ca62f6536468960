"""The error for a class target asked of a model whose output is not ``[B, C]``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import keras

__all__ = ["class_target_error", "output_kind"]


def output_kind(model: keras.Model) -> str:
    """``"classes"`` (one ``[B, C]`` output), ``"dense"`` (one ``[B, ..., C]`` output of rank ≥ 3),
    ``"detector"`` (``[B, N, 4 + 1 + C]`` or a dict with ``"boxes"`` and ``"classification"``),
    ``"several"`` (several outputs) or ``"other"``."""
    import keras

    from ..model.walker import is_graph_model

    if is_graph_model(model):
        outputs = model.output
    else:
        from ..model.copy import probe_input

        outputs = model(probe_input(model), training=False)
    if isinstance(outputs, dict) and {"boxes", "classification"} <= set(outputs):
        return "detector"
    flat = keras.tree.flatten(outputs)
    if len(flat) != 1:
        return "several"
    shape = tuple(flat[0].shape)
    if len(shape) == 2:
        return "classes"
    if len(shape) == 3 and shape[-1] is not None and shape[-1] > 5:
        return "dense or detector"
    if len(shape) >= 3:
        return "dense"
    return "other"


_ADVICE = {
    "dense": "its output is dense ([B, H', W', C], a segmentation): explain a region with "
    "targets=sk.targets.region(masks, classes)",
    "detector": "it is a detector ([B, N, 4 + 1 + C] proposals or boxes/classification): explain a box with "
    "targets=sk.targets.box(boxes)",
    "dense or detector": "its output is [B, N, C]: for a detector's raw proposals use "
    "targets=sk.targets.box(boxes); for a dense output (a sequence labeller) "
    "targets=sk.targets.region(masks, classes)",
    "several": "it has several outputs: pick one with targets=sk.targets.output(name_or_index, classes)",
    "other": "explain an inner unit with targets=sk.targets.unit(layer, index), or pass "
    "targets=score_fn (a callable returning [B] or [B, K] scores)",
}


def class_target_error(model: keras.Model, targets: Any) -> ValueError:
    """``ValueError`` saying that class targets need a ``[B, C]`` output and which kind to use."""
    kind = output_kind(model)
    advice = _ADVICE.get(kind, _ADVICE["other"])
    return ValueError(
        f"class targets need a model whose output is [batch, classes]; model {model.name!r} is not: "
        f"{advice}; received targets={targets!r}."
    )
