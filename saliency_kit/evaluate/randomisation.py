"""Randomisation: does the map change when what it should explain changes?

- :func:`randomization_test` — Adebayo et al. (2018), "Sanity Checks for Saliency Maps": a map
  that survives re-initialising the model's weights does not explain the model. Modes: Adebayo's
  ``"cascading"`` and ``"independent"``, and Quantus' ``"mprt"`` (Adebayo et al.),
  ``"smooth_mprt"`` and ``"efficient_mprt"`` (Hedström et al. 2024).
- :func:`random_logit` — Sixt et al. (2020): the map of the target compared with the map of a
  random other class; a class-sensitive method gives dissimilar maps (low SSIM).

The similarity arithmetic lives in :mod:`saliency_kit.evaluate.similarity`, the copies of the model
with re-initialised weights in :mod:`saliency_kit.evaluate.reinitialise`: weights are re-initialised
with each layer's own initialisers on a copy of the model (Quantus permutes a TensorFlow layer's
trained weights and resets a PyTorch layer's); the user's model is never changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..explanation import Explanation
from ..targets import is_target
from . import similarity as metrics
from ._common import RANDOM, check_int, preprocess, seed_noise
from .draws import rng
from .explained import rerun_options
from .mprt import discrete_entropy, mprt, parts_of
from .registry import metric
from .reinitialise import fixed_targets, randomized_copies
from .selected import class_count
from .shared import Shared

if TYPE_CHECKING:
    import keras

__all__ = [
    "randomization_test",
    "iter_randomization",
    "compare_maps",
    "comparison_maps",
    "random_logit",
    "randomization_score",
    "discrete_entropy",
    "ssim_flat",
]

_MODES = ("cascading", "independent")
_QUANTUS_MODES = ("mprt", "smooth_mprt", "efficient_mprt")


# --------------------------------------------------------------------------------------------
# Model-parameter randomisation (Adebayo et al. 2018)
# --------------------------------------------------------------------------------------------
def randomization_test(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    mode: str = "cascading",
    layers: Sequence[str] | None = None,
    seed: int = 0,
    **method_options: Any,
) -> list[dict]:
    """Adebayo et al.'s model-parameter randomisation test.

    The maps of a method on ``model`` are compared with the maps of the same method on copies of
    the model whose weights are re-initialised (an :class:`~saliency_kit.Explanation` names its
    method: run again as it was made, with its options, score and parts, at its own classes):

    - ``mode="cascading"``: the weighted layers are re-initialised from the output downwards,
      cumulatively (step ``i`` has the top ``i + 1`` layers random);
    - ``mode="independent"``: one layer at a time, every other layer keeping its trained weights.

    Re-initialisation happens on a clone of ``model`` (``keras.models.clone_model(recursive=True)``
    with the trained weights copied in); ``model`` itself is never changed. Each layer is
    re-initialised with its own initializers (``kernel_initializer``, ``bias_initializer``,
    ``gamma_initializer``, ``moving_mean_initializer``, ...) reseeded from ``seed``, so a run is
    reproducible. Layers inside nested models are included (paths ``"outer/inner"``). The targets
    are resolved once, on the model with its trained weights at the clean inputs, and kept for
    every step: ``"top1"`` stays the trained model's class, a target object keeps its columns and
    payload (a ``"predicted"`` region keeps the trained model's mask).

    Every input structure and target kind of :func:`saliency_kit.explain` is taken. With several
    model inputs or token ids, every step explains what ``attribute_to=`` names (default as
    ``explain``'s) with the other inputs as given; token ids are explained at each copy's own
    embeddings (a re-initialised ``Embedding`` moves them), an inner layer at its values under
    each copy's weights. One explained part is compared as a model of that input alone would be;
    several are compared side by side, one map per input and target (:func:`comparison_maps`,
    :func:`compare_maps`).

    Args:
        model: a Functional or Sequential ``keras.Model`` (nested models allowed).
        inputs: ``[B, ...]`` model inputs, or one array per model input (a list, tuple or dict),
            as for :func:`saliency_kit.explain`.
        explanation_or_method, targets, method_options: passed to :func:`saliency_kit.explain` (``score``,
            ``batch_size``, ``attribute_to`` and ``baseline_token`` too). A noisy method
            (``smoothgrad``) gets ``seed=seed`` unless given, so every step sees the same noise.
        mode: ``"cascading"`` or ``"independent"`` (Adebayo et al.), or Quantus' variants
            ``"mprt"``, ``"smooth_mprt"`` (options ``nr_samples``, ``noise_magnitude``) and
            ``"efficient_mprt"``, whose steps also have ``similarity`` and ``per_input [B, K]``
            (:func:`~saliency_kit.evaluate.mprt.mprt` says what each compares).
        layers: paths of the layers to randomise (a nested model's name stands for all its
            weighted layers); default all weighted layers. Always visited from the output down.
        seed: seed of the re-initialisation.

    Returns:
        One dict per step, in order (the original model is *not* an entry: its similarity to itself
        is 1 by definition; :func:`iter_randomization` yields its maps first if you need them):

        - ``layer``: the path of the layer re-initialised at this step;
        - ``spearman_abs``: Spearman rank correlation of the magnitude maps ``Σ_c |attribution|``,
            mean over inputs and targets;
        - ``spearman``: the same on the signed maps ``Σ_c attribution``;
        - ``ssim``: SSIM of the magnitude maps after :func:`saliency_kit.evaluate.similarity.normalize_abs`
            (each divided by its 99th percentile, clipped to [0, 1]); with several explained parts,
            of each part whose maps are 2-D (an image's ``[H, W]``) on its own, averaged over those
            parts (the others have none: NaN when no explained part is an image);
        - ``step`` (1-based) and ``randomized``: the paths whose weights are random at this step.

        See :func:`comparison_maps` for the maps compared (CAM maps and non-image attributions
        are compared as they are; several explained parts side by side, so that the Spearman
        correlations rank every element of every part together, one map per input and target).
    """
    method, targets, method_options = _method_of(explanation_or_method, targets, method_options)
    if mode in _QUANTUS_MODES:
        return mprt(model, inputs, method, targets, mode=mode, layers=layers, seed=seed, **method_options)
    original = None
    results = []
    for step, (path, expl, randomized) in enumerate(
        iter_randomization(model, inputs, method, targets, mode=mode, layers=layers, seed=seed, **method_options)
    ):
        if path is None:
            original = expl
            continue
        results.append({"layer": path, **compare_maps(original, expl), "step": step, "randomized": randomized})
    return results


def iter_randomization(
    model: keras.Model,
    inputs: Any,
    method: str = "gradient",
    targets: Any = "top1",
    *,
    mode: str = "cascading",
    layers: Sequence[str] | None = None,
    seed: int = 0,
    **method_options: Any,
) -> Iterator[tuple[str | None, Explanation, list[str]]]:
    """The explanations behind :func:`randomization_test`, one step at a time.

    Yields ``(layer_path, explanation, randomized_paths)``: first ``(None, original, [])`` for the
    unchanged clone, then one tuple per step. Arguments as for :func:`randomization_test`.
    """
    from ..pipeline.api import explain

    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, _MODES + _QUANTUS_MODES))}; received {mode!r}.")
    seed_noise(method, method_options, seed)
    steps = randomized_copies(model, mode, layers, seed, "top_down")
    _, clone, _ = next(steps)
    fixed = fixed_targets(clone, inputs, targets, method_options)
    yield None, explain(clone, inputs, method, fixed, **method_options), []
    for path, clone, randomized in steps:
        yield path, explain(clone, inputs, method, fixed, **method_options), randomized


def compare_maps(original: Any, randomized: Any) -> dict:
    """``spearman_abs``, ``spearman`` and ``ssim`` of two explanations (means over inputs × targets).

    Spearman compares :func:`comparison_maps` (several explained parts side by side). SSIM compares
    2-D maps: with several explained parts, each part whose maps are ``[B, K, H, W]`` (an image, a
    CAM, a convolution's output) on its own, averaged over those parts; NaN when none is 2-D. One
    part is compared as a model of that input alone would be."""
    parts_a, parts_b = _part_maps(original), _part_maps(randomized)
    signed_a, magnitude_a = (_per_map(m) for m in _side_by_side(parts_a))
    signed_b, magnitude_b = (_per_map(m) for m in _side_by_side(parts_b))
    if len(parts_a) != len(parts_b) or signed_a.shape != signed_b.shape:
        raise ValueError(
            f"explanations must have maps of one shape; received {len(parts_a)} parts {signed_a.shape} and "
            f"{len(parts_b)} parts {signed_b.shape}."
        )
    if len(parts_a) == 1:
        pairs = [(magnitude_a, magnitude_b)]
    else:
        pairs = [(_per_map(a[1]), _per_map(b[1])) for a, b in zip(parts_a, parts_b) if a[2]]
    ssim = [metrics.ssim(a, b) for many_a, many_b in pairs for a, b in zip(many_a, many_b)]
    return {
        "spearman_abs": float(np.mean([metrics.spearman(a, b) for a, b in zip(magnitude_a, magnitude_b)])),
        "spearman": float(np.mean([metrics.spearman(a, b) for a, b in zip(signed_a, signed_b)])),
        "ssim": float(np.mean(ssim)) if ssim else float("nan"),
    }


def _per_map(maps: np.ndarray) -> np.ndarray:
    """``[B, K, ...]`` -> ``[B·K, ...]``: one map per input and target."""
    return maps.reshape(-1, *maps.shape[2:])


def comparison_maps(expl: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(signed, magnitude)`` maps ``[B, K, ...]`` the randomisation test compares.

    Image attributions ``[B, K, H, W, C]``: ``Σ_c a`` and ``Σ_c |a|`` (Adebayo et al.'s diverging
    and absolute-value visualisations); channels-first ones ``[B, K, C, H, W]`` (whose ``maps`` are
    ``[B, K, H, W]``) are summed over C the same way; CAM maps and non-image attributions: ``a``
    and ``|a|`` (token ids explained in embedding space: ``[B, K, T, D]``).

    With several explained parts (``expl.parts``: several model inputs), each part's maps by the
    same rule, flattened side by side ``[B, K, E]`` in the order the explanation holds them; one
    explained part keeps its own shape.
    """
    return _side_by_side(_part_maps(expl))


def _part_maps(expl: Any) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """``(signed, magnitude, two_d)`` of each explained part (of the one input when no parts):
    ``two_d`` when its maps are ``[B, K, H, W]``."""
    out = []
    for attributions, maps in parts_of(expl):
        a = np.asarray(attributions, dtype=np.float64)
        if a.ndim == 5:  # pixel attributions of images
            maps_hw = tuple(np.shape(maps)[2:])
            channels = 2 if a.shape[3:] == maps_hw and a.shape[2:4] != maps_hw else -1
            out.append((a.sum(axis=channels), np.abs(a).sum(axis=channels), np.ndim(maps) == 4))
        else:
            out.append((a, np.abs(a), np.ndim(maps) == 4))
    return out


def _side_by_side(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """The ``(signed, magnitude)`` maps of one part as they are, of several flattened side by side."""
    if len(parts) == 1:
        return parts[0][0], parts[0][1]
    return tuple(  # type: ignore[return-value]
        np.concatenate([part[i].reshape(*part[i].shape[:2], -1) for part in parts], axis=-1) for i in (0, 1)
    )


@metric("random_logit", family="randomisation", higher_is_better=False)
def random_logit(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    num_classes: int | None = None,
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """Sixt et al.'s random logit test: SSIM between the map of each target and the map of a class
    drawn uniformly among the others: float ``[B, K]``; lower is better (a class-sensitive map).

    As Quantus: the maps are the (flattened) element attributions, normalised (per map here, per
    batch in Quantus), compared by scikit-image's SSIM with a 7-wide window and the pair's joint
    range. ``num_classes`` defaults to the model's number of outputs (Quantus: 1000). The other
    class is drawn per input and target (seeded).

    A target object is explained again at another of its classes, everything else kept: a
    region's other class over the same mask, a box's other class, another component of a head,
    another unit of a layer (``num_classes`` defaults to how many there are).

    Shared options (:class:`~saliency_kit.evaluate.shared.Shared`): ``normalise=True``, ``abs=False``,
    ``score="logits"``.
    """
    shared = Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=False, score="logits")
    scored = shared.prepare(model, inputs, explanation_or_method, targets, perturbs=False)
    if not scored.selection.target.other_classes:
        raise ValueError(
            "random_logit draws other classes: give class targets, not a score function; received a callable."
        )
    if num_classes is None:
        num_classes = class_count(model, scored.selection, "random_logit", " (or num_classes=)")
    classes = check_int("num_classes", num_classes, 2)
    other = np.empty_like(scored.targets)
    for b, row in enumerate(scored.targets):
        generator = rng(seed, "random_logit", b)
        for k, target in enumerate(row):
            choice = int(generator.integers(0, classes - 1))
            other[b, k] = choice + (choice >= target)
    inputs_at = np.arange(len(scored.x))
    off = scored.explain(scored.x, inputs_at, inputs_at, other)
    a = preprocess(scored.elements, normalise=shared.normalise, absolute=shared.absolute)
    o = preprocess(off, normalise=shared.normalise, absolute=shared.absolute)
    return np.array([[ssim_flat(p.ravel(), q.ravel()) for p, q in zip(ra, rb)] for ra, rb in zip(a, o)])


def ssim_flat(a: np.ndarray, b: np.ndarray) -> float:
    """Quantus' ``ssim``: scikit-image's SSIM of two vectors, 7-wide window, data range the joint range."""
    from skimage.metrics import structural_similarity

    both = np.concatenate([a, b])
    return float(structural_similarity(a, b, data_range=float(np.abs(both.max() - both.min()))))


@metric("randomization", family="randomisation", higher_is_better=True)
def randomization_score(
    model: keras.Model,
    inputs: Any,
    explanation_or_method: Any = "gradient",
    targets: Any = "top1",
    *,
    mode: str = "efficient_mprt",
    seed: int = 0,
    batch_size: int = 32,
    **options: Any,
) -> np.ndarray:
    """The last step of :func:`randomization_test` (``mode="efficient_mprt"``: the complexity ratio
    of the fully randomised model's map to the original's) per input: float ``[B, K]``. An
    Explanation is run again as it was made (its method, options, score and parts; a noisy method
    with this ``seed``); the seeded ``"random"`` map, which does not depend on the weights, scores 1."""
    if isinstance(explanation_or_method, Explanation) and explanation_or_method.method == RANDOM:
        return np.ones(np.shape(explanation_or_method.targets))  # the same map whatever the weights: a ratio of 1
    steps = randomization_test(
        model, inputs, explanation_or_method, targets, mode=mode, seed=seed, **{"batch_size": batch_size, **options}
    )
    return np.asarray(steps[-1]["per_input"], dtype=np.float64)


def _method_of(explanation_or_method: Any, targets: Any, options: dict) -> tuple[Any, Any, dict]:
    """``(method, targets, options)`` that run an Explanation's method again as it was made (its
    options but its seed, its score and parts; class targets: its own classes); a method name as
    given."""
    expl = explanation_or_method
    if not isinstance(expl, Explanation):
        return expl, targets, options
    explained = {key: value for key, value in rerun_options(expl).items() if key != "seed"}
    explained["score"] = expl.options.get("score", "logits")
    if expl.parts:
        explained["attribute_to"] = list(expl.parts)
    if not is_target(targets) and not callable(targets):
        targets = np.asarray(expl.targets)
    return expl.method, targets, {**explained, **options}
