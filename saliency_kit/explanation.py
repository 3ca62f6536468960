"""``Explanation``: what :func:`saliency_kit.explain` returns."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .render import check_tokens
from .render.display import display_html, display_png

__all__ = ["Explanation"]


@dataclass
class Explanation:
    """Attributions of ``B`` inputs for ``K`` targets each (NumPy arrays, float32 unless said).

    Attributes:
        attributions: ``[B, K, *input.shape[1:]]`` for the pixel methods; for the methods
            declared with ``cam=True`` (``saliency_kit.methods.get(name).cam``: Grad-CAM and its
            kin) the maps: ``[B, K, H, W]`` for images, ``[B, K, T]`` for time series,
            ``[B, K, D, H, W]`` for volumes.
        maps: one channel-reduced map per input and target, for display: ``[B, K, H, W]`` for
            images, ``[B, K, *input.shape[1:-1]]`` for other inputs (reduced over the last axis).
            The reduction is the method's declared ``reduce`` (see :mod:`saliency_kit.methods`):
            e.g. max |a| for gradient and guided backprop, the signed sum for gradient × input,
            integrated gradients, LRP and DeepLIFT, the mean for occlusion, the CAM itself for
            the CAM methods.
        targets: int64 ``[B, K]``, the column each attribution explains: its class (of a
            classifier, a region or a box), its column of a callable target, its component of an
            ``output`` head, or its ``unit`` index (flat for a tuple index).
        scores: ``[B, K]``, the score of each target on the input as given (logits by default);
            None when ``explain`` was called ``with_scores=False``.
        method: the method's name.
        options: every option of the method, defaults filled in (and a drawn ``seed`` recorded),
            and ``"score"``: what was differentiated (``"logits"`` or ``"output"``; ``"output"``
            also when ``score="logits"`` could not look behind a final softmax/sigmoid).
        layer: the layer path used by the CAM methods (``"outer/inner"`` when nested), else None.
        completeness_gap: for the methods that sum to a score difference (integrated gradients,
            DeepLIFT), ``[B, K]``: ``Σ attributions − (s(x) − s(baseline))``; else None.
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
        parts: for a request that is not one float input (several inputs, token ids, an inner
            layer): ``{name: kind}`` of each part explained, in the model's input order (inner
            layers last), ``kind`` ``"input"``,
            ``"embedding"`` (token ids explained at their embedding) or ``"layer"``; then
            ``attributions`` and ``maps`` come in the structure the inputs came in (a dict keyed
            by input name, a list with ``None`` for an input not explained) or, for one layer,
            as one array. Else None.
        backend: the Keras backend that computed it (``"tensorflow"``, ``"jax"`` or ``"torch"``).
    """

    attributions: np.ndarray
    maps: np.ndarray
    targets: np.ndarray
    scores: np.ndarray | None
    method: str
    options: dict = field(default_factory=dict)
    layer: str | None = None
    completeness_gap: np.ndarray | None = None
    rewritten: list | None = None
    target_info: list | None = None
    parts: dict | None = None
    backend: str | None = None

    def __len__(self) -> int:
        return len(self.targets)

    def __repr__(self) -> str:
        extra = f", layer={self.layer!r}" if self.layer else ""
        if self.rewritten is not None:
            extra += f", rewritten=[{len(self.rewritten)} names]"
        targets = self.targets.tolist() if self.targets.size <= 16 else self.targets.shape
        return (
            f"Explanation(method={self.method!r}, attributions={_shapes(self.attributions)}, "
            f"maps={_shapes(self.maps)}, targets={targets}{extra})"
        )

    def map_of(self, name: str) -> np.ndarray:
        """The maps of the part called ``name`` (an input's name, or a layer's path), whatever
        structure ``maps`` has: a dict's entry, a list's entry (the list is in the model's input
        order, ``None`` for inputs not explained, and ``parts`` lists the explained ones in that
        order), or the one array."""
        return self._select(self.maps, name)

    def attributions_of(self, name: str) -> np.ndarray:
        """The attributions of the part called ``name``, read as :meth:`map_of` reads the maps."""
        return self._select(self.attributions, name)

    def _select(self, value, name: str):
        if self.parts is None or name not in self.parts:
            raise KeyError(f"no part called {name!r}; this explanation has {list(self.parts or [])}.")
        if isinstance(value, dict):
            return value[name]
        if isinstance(value, (list, tuple)):
            explained = [m for m in value if m is not None]
            if len(explained) != len(self.parts):
                raise ValueError(
                    f"this explanation holds {len(explained)} explained inputs but parts name {len(self.parts)} "
                    f"({list(self.parts)}); expected one per part, in the model's input order."
                )
            return explained[list(self.parts).index(name)]
        return value

    @property
    def token_maps(self) -> np.ndarray:
        """The maps ``[B, K, T]`` of token ids explained in embedding space (the first such
        input), else ``maps`` itself."""
        for name, kind in (self.parts or {}).items():
            if kind == "embedding":
                return self.map_of(name)
        return self.maps

    # Display: an Explanation shows itself as its grid in Jupyter (see saliency_kit.render.grid), a
    # volume as slices (render.volume), tokens as coloured spans (with_tokens, render.tokens_html).
    def with_originals(self, originals: Any, class_names: Any = None) -> Explanation:
        """A copy that displays with ``originals`` (the images as loaded; for several inputs, in
        the inputs' structure: a dict by name or a list in the model's input order) and
        ``class_names``; the arrays are shared, not copied. ``sk.render.show(expl, originals)`` does the same once."""

        shown = copy.copy(self)
        shown.__dict__["_display"] = (originals, class_names)
        return shown

    def with_tokens(self, tokens: Any) -> Explanation:
        """A copy that displays in notebooks as its ``tokens`` coloured by their maps
        (:func:`saliency_kit.render.tokens_html`), for maps ``[B, K, T]`` of token sequences:
        ``tokens`` is a list of str per input (or one list for one input), at most ``T`` each.
        The arrays are shared, not copied."""

        shown = copy.copy(self)
        shown.__dict__["_tokens"] = check_tokens(tokens, np.shape(self.token_maps))
        return shown

    @property
    def tokens(self) -> list | None:
        """The tokens this explanation displays with (:meth:`with_tokens`), else None."""
        return self.__dict__.get("_tokens")

    def _repr_html_(self) -> str | None:
        """Token explanations (token ids explained at their embedding, or given tokens with
        :meth:`with_tokens`) as coloured, escaped HTML spans, their positions as labels when no
        tokens were given; several inputs as one section per input; None otherwise, so that
        notebooks show the grid (:meth:`_repr_png_`). See :mod:`saliency_kit.render.display`."""
        originals, class_names = self.__dict__.get("_display", (None, None))
        return display_html(self, originals, class_names)

    def _repr_png_(self) -> bytes | None:
        """The grid as PNG bytes (its first 8 inputs), for Jupyter and IPython; for volumes, the
        slices of the first input and target (render.volume); for several inputs, each input's
        picture under its name; None for token explanations, which display as HTML."""
        originals, class_names = self.__dict__.get("_display", (None, None))
        return display_png(self, originals, class_names)


def _shapes(value: object) -> object:
    if isinstance(value, dict):
        return {k: _shapes(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shapes(v) for v in value]
    return None if value is None else tuple(np.shape(value))  # type: ignore[call-overload]
