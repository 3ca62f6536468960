"""Deletion and insertion curves (RISE, Petsiuk et al. 2018): the score as pixels are removed
(or added to a blurred image) in order of decreasing map value, with a random order beside them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import ndimage

from ..engine import channel_axis, forward_scores, target_scores
from ..targets import class_names_of, is_target
from . import similarity as metrics
from ._common import seed_noise, several_parts_error
from .explained import Scored, prepare
from .registry import metric
from .scoring import forward

if TYPE_CHECKING:
    import keras

__all__ = ["deletion_insertion", "deletion_auc", "insertion_auc", "MAX_BATCH_BYTES"]

#: The perturbed images of several inputs are built and scored together up to about this many bytes.
MAX_BATCH_BYTES = 256 * 2**20


def deletion_insertion(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    steps: int = 32,
    baseline: Any = "zeros",
    blur_sigma: float = 5.0,
    score: str = "output",
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> dict:
    """RISE's deletion and insertion curves of each input and target of an explanation, called as
    every metric is: ``deletion_insertion(model, inputs, explanation_or_method, targets, ...)``.

    Pixels are ranked by ``explanation.maps`` in decreasing order (ties broken in a seeded random
    order, so flat regions are not visited in raster order). At step ``i`` of ``steps`` the top
    ``round(i·H·W/steps)`` pixels (all channels) are

    - *deletion*: replaced by ``baseline`` in the image (score should drop fast: low AUC is good);
    - *insertion*: copied from the image into a blurred copy of it (``scipy.ndimage.gaussian_filter``
      per channel with ``blur_sigma``; score should rise fast: high AUC is good).

    The same two curves with a random pixel order (seeded, one order per input) are the baseline a
    map must beat. Every perturbed image is scored through the engine's batched forward pass
    (with its input's target payload and other model inputs): ``score="output"`` (default) scores
    the model's output as it is, i.e. the softmax probability of the target class for a classifier
    ending in softmax, as RISE does; ``score="logits"`` scores the values before the softmax.

    Args:
        model: the model that was explained.
        inputs: ``[B, H, W, C]`` model inputs the explanation was computed on (``[B, C, H, W]``
            for a channels-first model: pixels are still removed across all channels). For a
            model with several inputs, one array per input (a list, tuple or dict, as given to
            ``explain``): the explanation must explain one image input of them
            (``attribute_to=`` its name), whose pixels are removed, the other inputs held at each
            input's own values. Several explained inputs, token ids or a non-image input are
            refused: the curves remove pixels of one image.
        explanation_or_method: an :class:`saliency_kit.Explanation` with ``maps [B, K, H, W]`` and
            ``targets`` (of several inputs: its maps of the explained image), or a method name,
            explained first with ``targets`` and the method's ``options``.
        targets: the target object the explanation was made for (``saliency_kit.targets.region``,
            ``box``, ``output``, ``unit``): every perturbed copy is scored with its input's target
            (a region's predicted mask stays the one of the clean input). Class targets (``None``
            too): an Explanation is scored at its own classes.
        steps: evaluations per curve minus one (the curve has ``steps + 1`` points, 0 % to 100 %).
        baseline: ``"zeros"``, ``"blur"`` (the blurred image), a scalar, or an array broadcastable
            to the images (e.g. one ``[H, W, C]`` image).
        blur_sigma: σ in pixels of the insertion start image.
        score, batch_size: passed to ``forward_scores``.
        seed: seed of the random order and of the tie-breaking (and of a noisy method).
        options: ``class_names=`` (the names class targets may use, as ``explain``'s) and, when
            ``explanation_or_method`` names a method, the method's options.

    The perturbed images of several inputs are built and scored together, up to about
    :data:`MAX_BATCH_BYTES` at a time.

    Returns:
        A dict of NumPy arrays: ``fractions [S+1]`` (fraction of pixels changed at each step),
        ``deletion_curve``, ``insertion_curve``, ``random_deletion_curve``,
        ``random_insertion_curve`` ``[B, K, S+1]``; ``deletion_auc``, ``insertion_auc``,
        ``random_deletion_auc``, ``random_insertion_auc`` ``[B, K]`` (trapezoid rule over fractions).
    """
    class_names = options.pop("class_names", None)
    explanation = _explanation(model, inputs, explanation_or_method, targets, seed, batch_size, class_names, options)
    targets = targets if is_target(targets) else None  # class targets: the explanation's own
    scored, given, maps, tgt, channels_first = _explained_images(
        model, inputs, explanation, targets, score, batch_size, class_names
    )
    x = np.moveaxis(given, 1, -1) if channels_first else given
    batch, height, width, _ = x.shape
    _check_curves(maps, tgt, (batch, height, width), steps)
    score_rows = _row_scorer(model, given, scored, targets, tgt, score, batch_size, class_names)

    blurred = np.stack([ndimage.gaussian_filter(img, sigma=(blur_sigma, blur_sigma, 0)) for img in x])
    base = _baseline(baseline, given, np.moveaxis(blurred, -1, 1) if channels_first else blurred)
    if channels_first:
        base = np.moveaxis(base, 1, -1)
    counts = np.rint(np.arange(steps + 1) * height * width / steps).astype(np.int64)
    curves = _scored_curves(x, (base, blurred), maps, counts, channels_first, score_rows, np.random.default_rng(seed))
    fractions = counts / (height * width)
    result = {"fractions": fractions, **curves}
    for name in _CURVES:
        result[name.replace("_curve", "_auc")] = metrics.trapezoid_auc(curves[name], fractions)
    return result


def _explanation(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any,
    seed: int,
    batch_size: int,
    class_names: Any,
    options: dict,
) -> Any:
    """The Explanation the curves rank pixels by: a method name explained (a noisy one with
    ``seed``) with ``options``; anything else as given (``TypeError`` for options then)."""
    if not isinstance(explanation_or_method, str):
        if options:
            raise TypeError(f"deletion_insertion has no option {sorted(options)[0]!r}; received {sorted(options)}.")
        return explanation_or_method
    from ..pipeline.api import explain

    seed_noise(explanation_or_method, options, seed)
    return explain(
        model, inputs, explanation_or_method, targets, batch_size=batch_size, class_names=class_names, **options
    )


def _scored_curves(
    x: np.ndarray,
    starts: tuple[np.ndarray, np.ndarray],
    maps: np.ndarray,
    counts: np.ndarray,
    channels_first: bool,
    score_rows: Callable[[np.ndarray, np.ndarray], np.ndarray],
    rng: np.random.Generator,
) -> dict:
    """Every curve ``[B, K, S+1]`` of the images ``x [B, H, W, C]`` (``starts``: the deletion
    baseline and the blurred images), built and scored up to about :data:`MAX_BATCH_BYTES` at a
    time (``score_rows`` takes them in the model's layout)."""
    base, blurred = starts
    batch, n_targets, steps = len(x), maps.shape[1], len(counts) - 1
    per_input_bytes = (2 * n_targets + 2) * (steps + 1) * x[0].nbytes
    chunk = max(1, int(MAX_BATCH_BYTES // max(per_input_bytes, 1)))
    curves = {name: np.zeros((batch, n_targets, steps + 1)) for name in _CURVES}
    for start in range(0, batch, chunk):
        images, positions = _perturbed(x, base, blurred, maps, counts, range(start, min(start + chunk, batch)), rng)
        stacked = np.concatenate(images).astype(x.dtype, copy=False)
        if channels_first:
            stacked = np.ascontiguousarray(np.moveaxis(stacked, -1, 1))
        scores = score_rows(stacked, np.repeat([b for _, b, _ in positions], steps + 1))
        scores = scores.reshape(len(positions), steps + 1, n_targets)
        for (name, row, column), s in zip(positions, scores):
            if column is None:
                curves[name][row] = s.T  # random order: one set of images scored for every target
            else:
                curves[name][row, column] = s[:, column]
    return curves


def _explained_images(
    model: keras.Model, inputs: Any, explanation: Any, targets: Any, score: str, batch_size: int, class_names: Any
) -> tuple[Scored | None, np.ndarray, np.ndarray, np.ndarray, bool]:
    """``(scored, images, maps [B, K, H, W], targets [B, K], channels_first)``: the images whose
    pixels are removed (float32, as the model takes them), the explanation's maps of them and
    its columns; ``scored`` (a :class:`~.explained.Scored`) for a model with several inputs or
    inputs given as a structure, else ``None``."""
    from ..pipeline.parts import structured

    if structured(model, inputs, list(getattr(explanation, "parts", None) or []) or None):
        scored = _one_image(model, inputs, explanation, targets, score, batch_size, class_names)
        return scored, scored.x.astype(np.float32), scored.pixels, scored.targets, scored.channel_axis == 0
    given = np.asarray(inputs, dtype=np.float32)
    maps = np.asarray(explanation.maps)
    tgt = np.asarray(explanation.targets)
    if given.ndim != 4:
        raise ValueError(f"deletion_insertion needs image inputs [B, H, W, C]; received shape {given.shape}.")
    # [B, C, H, W]: perturbed as [B, H, W, C], scored as given
    return None, given, maps, tgt, channel_axis(model, given) == 0


def _check_curves(maps: np.ndarray, tgt: np.ndarray, images: tuple[int, int, int], steps: Any) -> None:
    """``ValueError``/``TypeError`` unless ``maps`` are ``[B, K, H, W]`` of the ``images``'
    ``(B, H, W)``, ``tgt`` class indices ``[B, K]`` and ``steps`` a positive int."""
    batch, height, width = images
    if maps.ndim != 4 or maps.shape[0] != batch or maps.shape[2:] != (height, width):
        raise ValueError(
            f"explanation.maps must be [B, K, H, W] = [{batch}, K, {height}, {width}] to match the inputs "
            f"(pass the inputs the explanation was computed on); received {maps.shape}."
        )
    if tgt.shape != maps.shape[:2] or not np.issubdtype(tgt.dtype, np.integer) or (tgt < 0).any():
        raise ValueError(
            f"explanation.targets must be class indices [B, K] = {maps.shape[:2]} (an explanation of a "
            f"callable target cannot be scored class by class); received {tgt.dtype} {tgt.shape}."
        )
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)):
        raise TypeError(f"steps must be a positive int; received {steps!r}.")
    if steps < 1:
        raise ValueError(f"steps must be a positive int; received {steps!r}.")


def _row_scorer(
    model: keras.Model,
    given: np.ndarray,
    scored: Scored | None,
    targets: Any,
    tgt: np.ndarray,
    score: str,
    batch_size: int,
    class_names: Any,
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``score_rows(images [N, ...], sources int [N]) -> [N, K]``: the scores of perturbed copies
    of the inputs ``sources``, each with its input's target (a target object's payload, the
    explanation's classes ``tgt``) and, for ``scored``, its input's other model inputs."""
    from ..pipeline.api import resolve_selection

    if scored is not None:
        return lambda images, sources: forward(scored, images, sources)
    selection = None
    if targets is not None:
        selection = resolve_selection(
            model, given, targets, score=score, batch_size=batch_size, class_names=class_names_of(class_names)
        )
        if not selection.target.score_vector and np.asarray(selection.columns).shape != tgt.shape:
            raise ValueError(
                f"targets must be the target the explanation was made for: it gives "
                f"{np.asarray(selection.columns).shape[1]} columns per input, the explanation "
                f"{tgt.shape[1]}; received {targets!r}."
            )
    if selection is None or selection.target.score_vector:  # the explanation's classes, read from the score vector
        return lambda images, sources: np.asarray(
            forward_scores(model, images, tgt[sources], score=score, batch_size=batch_size)
        )
    chosen = selection
    return lambda images, sources: np.asarray(
        target_scores(model, images, chosen.take(sources), score=score, batch_size=batch_size)
    )


def _perturbed(
    x: np.ndarray,
    base: np.ndarray,
    blurred: np.ndarray,
    maps: np.ndarray,
    counts: np.ndarray,
    inputs: range,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[tuple[str, int, int | None]]]:
    """The images of every curve of the ``inputs`` (``x``, ``base`` and ``blurred`` ``[B, H, W, C]``):
    per input, for each target its deletion and insertion images in the map's order, then the
    random order's; each ``[S+1, H, W, C]`` (the top ``counts[i]`` pixels changed at step ``i``),
    with its ``(curve, input, target)`` (``None``: the random order, for every target)."""
    _, height, width, _ = x.shape
    steps = len(counts)
    images: list[np.ndarray] = []
    positions: list[tuple[str, int, int | None]] = []
    for b in inputs:
        ranks = [_ranks(maps[b, k], rng) for k in range(maps.shape[1])]
        random_rank = rng.permutation(height * width)
        firsts = [(counts[:, None] > r[None, :]).reshape(steps, height, width, 1) for r in ranks]
        rand_first = (counts[:, None] > random_rank[None, :]).reshape(steps, height, width, 1)
        for k, first in enumerate(firsts):
            images.append(np.where(first, base[b], x[b]))
            positions.append(("deletion_curve", b, k))
            images.append(np.where(first, x[b], blurred[b]))
            positions.append(("insertion_curve", b, k))
        images.append(np.where(rand_first, base[b], x[b]))
        positions.append(("random_deletion_curve", b, None))
        images.append(np.where(rand_first, x[b], blurred[b]))
        positions.append(("random_insertion_curve", b, None))
    return images, positions


def _one_image(
    model: keras.Model, inputs: Any, explanation: Any, targets: Any, score: str, batch_size: int, class_names: Any
) -> Any:
    """The explained image of a model with several inputs (or inputs given as a structure), as a
    :class:`~.explained.Scored` (its ``x`` the image ``[B, H, W, C]``, ``pixels`` the explanation's
    maps of it, ``score`` this metric's): ``ValueError`` for several explained parts or one that
    is not an image input."""
    given = "top1" if targets is None else targets  # class targets: the explanation's own
    scored = prepare(
        model,
        inputs,
        explanation,
        given,
        score=score,
        batch_size=batch_size,
        method_options={"class_names": class_names},
        perturbs=True,
    )
    if scored.packed:
        raise several_parts_error("deletion_insertion", scored.names)
    if scored.channel_axis is None:
        (part,) = scored.parts.parts
        raise ValueError(
            "deletion_insertion removes image pixels: it needs one explained image input [B, H, W, C]; the "
            f"explanation explains {part.name!r} ({'token ids in embedding space' if part.embedding else 'an input'}) "
            f"of shape {list(scored.x.shape)}: explain an image input of the model (attribute_to= its name); "
            f"received attribute_to={scored.names!r}."
        )
    return dataclasses.replace(scored, score=score)


_CURVES = ("deletion_curve", "insertion_curve", "random_deletion_curve", "random_insertion_curve")


def _ranks(m: Any, rng: np.random.Generator) -> np.ndarray:
    """Rank of every pixel (0 = most important) by decreasing value, ties in random order, NaN last."""
    values = np.nan_to_num(np.asarray(m, dtype=np.float64).ravel(), nan=-np.inf)
    order = np.lexsort((rng.random(values.size), -values))
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[order] = np.arange(values.size)
    return ranks


def _baseline(baseline: Any, x: Any, blurred: Any) -> np.ndarray:
    if isinstance(baseline, str):
        if baseline == "zeros":
            return np.zeros_like(x)
        if baseline == "blur":
            return blurred
        raise ValueError(f"baseline must be 'zeros', 'blur', a number or an array; received {baseline!r}.")
    value = np.asarray(baseline, dtype=x.dtype)
    try:
        return np.broadcast_to(value, x.shape)
    except ValueError:
        raise ValueError(
            f"baseline cannot be broadcast to the inputs' shape {x.shape}: give a scalar, one input's "
            f"shape or the inputs' shape; received shape {value.shape}."
        ) from None


@metric("deletion", family="faithfulness", higher_is_better=False)
def deletion_auc(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """The area under the deletion curve of :func:`deletion_insertion`: float ``[B, K]``, lower is
    better. ``options``: :func:`deletion_insertion`'s (``steps``, ``baseline``, ...), the method's
    options when ``explanation_or_method`` names one."""
    return _curves(model, inputs, explanation_or_method, targets, seed, batch_size, options)["deletion_auc"]


@metric("insertion", family="faithfulness", higher_is_better=True)
def insertion_auc(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """The area under the insertion curve of :func:`deletion_insertion`: float ``[B, K]``, higher is
    better (options as :func:`deletion_auc`'s)."""
    return _curves(model, inputs, explanation_or_method, targets, seed, batch_size, options)["insertion_auc"]


def _curves(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any,
    targets: Any,
    seed: int,
    batch_size: int,
    options: dict,
) -> dict:
    """:func:`deletion_insertion` of the metrics' arguments."""
    return deletion_insertion(
        model, inputs, explanation_or_method, targets, seed=seed, batch_size=batch_size, **options
    )
