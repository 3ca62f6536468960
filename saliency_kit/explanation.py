"""``Explanation``: what :func:`saliency_kit.explain` returns."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Explanation:
    """Attributions of ``B`` inputs for ``K`` targets each (NumPy arrays, float32 unless said).

    Attributes:
        attributions: ``[B, K, *input.shape[1:]]`` for the pixel methods; ``[B, K, H, W]`` for
            the CAM methods (``gradcam``, ``gradcam_plus_plus``).
        maps: one channel-reduced map per input and target, for display: ``[B, K, H, W]`` for
            images, ``[B, K, *input.shape[1:-1]]`` for other inputs (reduced over the last axis).
            The reduction depends on the method (see :mod:`saliency_kit.methods`): max |a| for
            gradient, guided backprop, deconvnet and guided Grad-CAM; the signed sum for
            gradient × input and integrated gradients; the mean for occlusion; SmoothGrad as its
            base method; the CAM itself for Grad-CAM and Grad-CAM++.
        targets: int64 ``[B, K]``, the column each attribution explains: its class (of a
            classifier, a region or a box), its ``score_fn`` column, its component of an
            ``output`` head, or its ``unit`` index (flat for a tuple index).
        scores: ``[B, K]``, the score of each target on the input as given (logits by default).
        method: the method's name.
        options: every option of the method, defaults filled in (and a drawn ``seed`` recorded),
            and ``"score"``: what was differentiated (``"logits"`` or ``"output"``; ``"output"``
            also when ``score="logits"`` could not look behind a final softmax/sigmoid).
        layer: the layer path used by the CAM methods (``"outer/inner"`` when nested), else None.
        completeness_gap: integrated gradients only, ``[B, K]``:
            ``Σ attributions − (s(x) − s(baseline))``.
        rewritten: what the method's backward rule changed, or None for plain gradients. For
            guided backprop, deconvnet and the methods built on them (guided Grad-CAM, SmoothGrad
            of either): every ReLU-family activation the rule took over, as graph op names
            (``"model/dense/Relu"``; an activation made of several ops, such as a ReLU with a
            ``max_value`` or ``threshold``, by its last op). For LRP and DeepLIFT: the layer
            paths rewritten.
        target_info: ``B`` lists of ``K`` dicts, what each column explains: ``"kind"``
            (``"class"``, ``"callable"``, ``"region"``, ``"box"``, ``"output"``, ``"unit"`` or a
            kind of your own) and its details (``"class"`` and ``"name"``; a region's
            ``"pixels"``; a box's ``"box"`` ``(x0, y0, x1, y1)``; a unit's ``"layer"`` and
            ``"index"``).
    """

    attributions: np.ndarray
    maps: np.ndarray
    targets: np.ndarray
    scores: np.ndarray
    method: str
    options: dict = field(default_factory=dict)
    layer: str | None = None
    completeness_gap: np.ndarray | None = None
    rewritten: list | None = None
    target_info: list | None = None

    def __len__(self) -> int:
        return len(self.attributions)

    def __repr__(self) -> str:
        extra = f", layer={self.layer!r}" if self.layer else ""
        if self.rewritten is not None:
            extra += f", rewritten=[{len(self.rewritten)} names]"
        return (
            f"Explanation(method={self.method!r}, attributions={tuple(self.attributions.shape)}, "
            f"maps={tuple(self.maps.shape)}, targets={self.targets.tolist() if self.targets.size <= 16 else self.targets.shape}{extra})"
        )

    # Display: an Explanation shows itself as its grid in Jupyter (see saliency_kit.render.grid).
    def with_originals(self, originals, class_names=None) -> "Explanation":
        """A copy that displays with ``originals`` (the images as loaded) and ``class_names``;
        the arrays are shared, not copied. ``sk.render.show(expl, originals)`` does the same once."""
        import copy

        shown = copy.copy(self)
        shown.__dict__["_display"] = (originals, class_names)
        return shown

    def _repr_png_(self) -> bytes:
        """The grid as PNG bytes (its first 8 inputs), for Jupyter and IPython."""
        from .render import explanation_png

        originals, class_names = self.__dict__.get("_display", (None, None))
        return explanation_png(self, originals, class_names)

