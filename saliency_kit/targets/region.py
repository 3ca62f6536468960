"""``region``: a class's logits reduced over a region of a dense output (segmentation).

For a model whose output is dense, ``[B, H', W', C]`` (any ``[B, *spatial, C]``), the score of
column k of input b is

    s_bk = Σ_p m_bk(p) · f_b(p)[c_bk] / |m_bk|     (reduce="mean"; "sum" drops the division)

with ``m`` the region's mask over the output's spatial positions ``p``, ``c`` the class and
``f`` the logits (the view's values). An empty region scores 0. Masks: one ``[H', W']`` for
every input, one per input ``[B, H', W']``, or ``"predicted"``: for each class, the positions
whose arg-max at the clean input is that class, frozen there (noisy, blurred and occluded
copies are scored on the same positions). A one-position mask explains one pixel.

Score-CAM's probability of a region: the softmax over the classes of the region's reduced
logits, taken at its class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .base import PerInput, Resolved, Target, TargetRequest
from .errors import output_kind
from .parse import parse, resolve

if TYPE_CHECKING:
    import keras

__all__ = ["Region", "region"]


class Region(Target):
    """See :func:`region`."""

    kind = "region"

    def __init__(self, masks: Any, classes: Any = "top1", reduce: str = "mean"):
        if reduce not in ("mean", "sum"):
            raise ValueError(f"reduce must be 'mean' or 'sum'; received {reduce!r}.")
        if isinstance(masks, str):
            if masks != "predicted":
                raise ValueError(
                    f"masks must be a bool array [H', W'], [B, H', W'] or 'predicted'; received {masks!r}."
                )
        else:
            array = np.asarray(masks)
            if array.dtype != bool:
                raise TypeError(f"masks must be a bool array (or 'predicted'); received dtype {array.dtype}.")
            masks = array
        self.masks = masks
        self.classes = classes
        self.reduce = reduce

    def kernel_key(self) -> tuple:
        return (type(self), self.reduce)

    def __repr__(self) -> str:
        masks = self.masks if isinstance(self.masks, str) else f"bool{list(self.masks.shape)}"
        return f"region(masks={masks}, classes={self.classes!r}, reduce={self.reduce!r})"

    # -- host ----------------------------------------------------------------------------------
    def resolve(self, request: TargetRequest) -> Resolved:
        spatial, C = _dense_shape(request.model)
        B = request.num_inputs

        def predicted_classes() -> np.ndarray:  # [B, P]: the arg-max class at each position
            return np.argmax(np.asarray(request.clean_outputs()).reshape(B, -1, C), axis=-1)

        spec = parse(self.classes, B, C, request.class_names)
        coverage = None
        if spec.needs_scores:  # "topK": the K classes covering the most positions (of the region)
            inside = None if isinstance(self.masks, str) else self._given(B, spatial).reshape(B, -1)
            hits = np.zeros((B, C))
            predicted = predicted_classes()
            for b in range(B):
                chosen = predicted[b] if inside is None else predicted[b][inside[b]]
                hits[b] = np.bincount(chosen, minlength=C)
            coverage = hits
        classes = resolve(spec, coverage, B)
        if isinstance(self.masks, str):
            masks = predicted_classes()[:, None, :] == classes[:, :, None]  # [B, K, P]
            masks = masks.reshape(B, classes.shape[1], *spatial)
            payload = {"classes": classes, "masks": masks}
            sizes = masks.reshape(B, classes.shape[1], -1).sum(-1)
        else:
            given = self._given(B, spatial)
            payload = {"classes": classes, "masks": PerInput(given)}
            sizes = np.repeat(given.reshape(B, -1).sum(-1)[:, None], classes.shape[1], axis=1)
        names = request.class_names
        info = [
            [
                {
                    "kind": "region",
                    "class": int(c),
                    **({"name": names[c]} if names and c < len(names) else {}),
                    "pixels": int(size),
                    "mask": "predicted" if isinstance(self.masks, str) else "given",
                }
                for c, size in zip(row, size_row)
            ]
            for row, size_row in zip(classes, sizes)
        ]
        return Resolved(classes, payload, info, self)

    def _given(self, B: int, spatial: tuple) -> np.ndarray:
        masks = self.masks
        if masks.shape == spatial:
            return np.broadcast_to(masks, (B, *spatial))
        if masks.shape == (B, *spatial):
            return masks
        raise ValueError(
            f"masks must have the output's spatial shape {list(spatial)} (every input) or "
            f"{[B, *spatial]} (one per input); received shape {list(masks.shape)}."
        )

    # -- evaluation ----------------------------------------------------------------------------
    def class_count(self, model: Any) -> int:
        return _dense_shape(model)[1]

    def object_masks(self, count: int, shape: tuple | None) -> np.ndarray:
        """The given masks, bool ``[count, H, W]`` (one ``[H, W]`` repeated for every input)."""
        if isinstance(self.masks, str):
            raise ValueError(
                "a region with masks='predicted' has masks only the model knows: pass the masks "
                "(bool [B, H, W]) or a region with given masks; received region(masks='predicted')."
            )
        array = np.asarray(self.masks)
        return np.broadcast_to(array, (count, *array.shape)).copy() if array.ndim == 2 else array

    # -- kernel --------------------------------------------------------------------------------
    def _reduced(self, outputs: Any, payload: Any, every_class: bool) -> Any:
        """``[n, K]`` (or ``[n, K, C]`` with ``every_class``): the logits reduced over the region."""
        from keras import ops

        logits = ops.cast(outputs, "float32")
        C = logits.shape[-1]
        flat = ops.reshape(logits, (-1, int(np.prod(logits.shape[1:-1])), C))  # [n, P, C]
        P = flat.shape[1]
        masks = payload["masks"]
        per_column = len(masks.shape) == len(outputs.shape)  # [n, K, *spatial] vs [n, *spatial]
        masks = ops.cast(ops.reshape(masks, (-1, masks.shape[1], P) if per_column else (-1, P)), "float32")
        if every_class:
            sums = (
                ops.einsum("npc,nkp->nkc", flat, masks)
                if per_column
                else ops.einsum("npc,np->nc", flat, masks)[:, None]
            )
        else:
            classes = ops.cast(payload["classes"], "int32")  # [n, K]
            picked = ops.take_along_axis(flat, ops.repeat(classes[:, None, :], P, axis=1), axis=2)  # [n, P, K]
            sums = ops.einsum("npk,nkp->nk", picked, masks) if per_column else ops.einsum("npk,np->nk", picked, masks)
        if self.reduce == "mean":
            count = ops.sum(masks, axis=-1)  # [n, K] or [n]
            count = ops.maximum(count if per_column else count[:, None], 1.0)
            sums = sums / (count[..., None] if every_class else count)
        return sums

    def score(self, outputs: Any, payload: Any) -> Any:
        return self._reduced(outputs, payload, every_class=False)

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        from keras import ops

        reduced = self._reduced(outputs, payload, every_class=True)  # [n, K or 1, C]
        classes = ops.cast(payload["classes"], "int32")  # [n, K]
        reduced = ops.broadcast_to(reduced, (ops.shape(classes)[0], classes.shape[1], reduced.shape[-1]))
        return ops.take_along_axis(ops.softmax(reduced, axis=-1), classes[..., None], axis=2)[..., 0]


def _dense_shape(model: keras.Model) -> tuple[tuple, int]:
    """``(spatial shape, classes)`` of ``model``'s dense output ``[B, *spatial, C]``."""
    from ..model.scores import output_shapes

    shapes = output_shapes(model)
    if len(shapes) != 1 or len(shapes[0]) < 3 or any(s is None for s in shapes[0][1:]):
        kind = output_kind(model)
        raise ValueError(
            "region targets need a model with one dense output [B, H', W', C] of known size (a "
            f"segmentation); model {model.name!r} gives {shapes if len(shapes) != 1 else list(shapes[0])}"
            + (" (use sk.targets.box for a detector)" if "detector" in kind else "")
            + "; received region(...)."
        )
    shape = shapes[0]
    return tuple(int(s) for s in shape[1:-1]), int(shape[-1])


def region(masks: Any, classes: Any = "top1", *, reduce: str = "mean") -> Region:
    """A region of a dense output ``[B, H', W', C]``: its class logits' mean (or ``"sum"``).

    Args:
        masks: bool ``[H', W']`` (every input), bool ``[B, H', W']`` (one per input), or
            ``"predicted"`` (per class, the positions whose arg-max at the clean input is that
            class, frozen there). ``H', W'`` are the output's spatial axes (any ``*spatial``).
        classes: as class targets: an int, a class name, a sequence of ``B`` ints or names, an
            int array ``[B, K]``, or ``"topK"``: the K classes covering most positions of the
            region (of the whole output for ``"predicted"``), most first.
        reduce: ``"mean"`` (default) or ``"sum"`` over the region.

    ``Explanation.target_info[b][k]``: ``{"kind": "region", "class", "pixels", "mask"}``.
    """
    return Region(masks, classes, reduce)
