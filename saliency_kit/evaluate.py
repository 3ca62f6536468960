"""Does an explanation mean anything? Sanity checks, faithfulness and localisation.

- :func:`randomization_test` — Adebayo et al. (2018), "Sanity Checks for Saliency Maps": a map
  that survives re-initialising the model's weights does not explain the model.
- :func:`deletion_insertion` — Petsiuk et al. (2018), RISE's deletion and insertion curves: the
  pixels a faithful map ranks first should matter most to the model.
- :func:`pointing_game` — Zhang et al. (2016): does the map's maximum land on the object?

The similarity and curve arithmetic lives in :mod:`saliency_kit.metrics`; this module drives the
model (through :func:`saliency_kit.explain` and the engine's batched ``forward_scores``).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from scipy import ndimage

from . import metrics

__all__ = [
    "randomization_test",
    "iter_randomization",
    "compare_maps",
    "comparison_maps",
    "deletion_insertion",
    "pointing_game",
]

_MODES = ("cascading", "independent")


# --------------------------------------------------------------------------------------------
# Model-parameter randomisation (Adebayo et al. 2018)
# --------------------------------------------------------------------------------------------
def randomization_test(
    model,
    inputs,
    method: str = "gradient",
    targets="top1",
    *,
    mode: str = "cascading",
    layers: Sequence[str] | None = None,
    seed: int = 0,
    **method_options,
) -> list[dict]:
    """Adebayo et al.'s model-parameter randomisation test.

    The maps of ``method`` on ``model`` are compared with the maps of the same method on copies of
    the model whose weights are re-initialised:

    - ``mode="cascading"``: the weighted layers are re-initialised from the output downwards,
      cumulatively (step ``i`` has the top ``i + 1`` layers random);
    - ``mode="independent"``: one layer at a time, every other layer keeping its trained weights.

    Re-initialisation happens on a clone of ``model`` (``keras.models.clone_model(recursive=True)``
    with the trained weights copied in); ``model`` itself is never changed. Each layer is
    re-initialised with its own initializers (``kernel_initializer``, ``bias_initializer``,
    ``gamma_initializer``, ``moving_mean_initializer``, ...) reseeded from ``seed``, so a run is
    reproducible. Layers inside nested models are included (paths ``"outer/inner"``). The targets
    are resolved once, on the original model, and kept fixed for every step.

    Args:
        model: a Functional or Sequential ``keras.Model`` (nested models allowed).
        inputs: ``[B, ...]`` model inputs, as for :func:`saliency_kit.explain`.
        method, targets, method_options: passed to :func:`saliency_kit.explain` (``score`` and
            ``batch_size`` too). A noisy method (``smoothgrad``) gets ``seed=seed`` unless given,
            so every step sees the same noise.
        mode: ``"cascading"`` or ``"independent"``.
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
        - ``ssim``: SSIM of the magnitude maps after :func:`saliency_kit.metrics.normalize_abs`
          (each divided by its 99th percentile, clipped to [0, 1]);
        - ``step`` (1-based) and ``randomized``: the paths whose weights are random at this step.

        See :func:`comparison_maps` for the maps compared (CAM maps and non-image attributions
        are compared as they are).
    """
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
    model,
    inputs,
    method: str = "gradient",
    targets="top1",
    *,
    mode: str = "cascading",
    layers: Sequence[str] | None = None,
    seed: int = 0,
    **method_options,
) -> Iterator[tuple[str | None, object, list[str]]]:
    """The explanations behind :func:`randomization_test`, one step at a time.

    Yields ``(layer_path, explanation, randomized_paths)``: first ``(None, original, [])`` for the
    unchanged clone, then one tuple per step. Arguments as for :func:`randomization_test`.
    """
    from .api import explain

    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, _MODES))}; received {mode!r}.")
    from .methods import get as get_method

    seed_option = get_method(method).seed_option(method_options)  # a noisy method: the same noise at every step
    if seed_option is not None and method_options.get(seed_option) is None:
        method_options[seed_option] = seed
    inputs = np.asarray(inputs)

    clone = clone_with_weights(model)
    all_layers = weighted_layers(clone)
    if not all_layers:
        raise ValueError(f"model {model.name!r} has no layer with weights: there is nothing to randomise; "
                         f"received a model without weights.")
    index = {path: i for i, (path, _) in enumerate(all_layers)}
    chosen = _select_layers(all_layers, layers)

    original = explain(clone, inputs, method, targets, **method_options)
    fixed_targets = targets if callable(targets) else np.asarray(original.targets)
    yield None, original, []

    randomized: list[str] = []
    for path, layer in reversed(chosen):  # from the output downwards
        saved = [w.numpy() for w in layer.weights] if mode == "independent" else None
        reinitialize(layer, seed=seed, salt=index[path])
        randomized = [*randomized, path] if mode == "cascading" else [path]
        yield path, explain(clone, inputs, method, fixed_targets, **method_options), randomized
        if saved is not None:
            for w, value in zip(layer.weights, saved):
                w.assign(value)


def compare_maps(original, randomized) -> dict:
    """``spearman_abs``, ``spearman`` and ``ssim`` of two explanations (means over inputs × targets)."""
    signed_a, magnitude_a = (_per_map(m) for m in comparison_maps(original))
    signed_b, magnitude_b = (_per_map(m) for m in comparison_maps(randomized))
    if signed_a.shape != signed_b.shape:
        raise ValueError(f"explanations must have maps of one shape; received {signed_a.shape} and {signed_b.shape}.")
    return {
        "spearman_abs": float(np.mean([metrics.spearman(a, b) for a, b in zip(magnitude_a, magnitude_b)])),
        "spearman": float(np.mean([metrics.spearman(a, b) for a, b in zip(signed_a, signed_b)])),
        "ssim": float(np.mean([metrics.ssim(a, b) for a, b in zip(magnitude_a, magnitude_b)])),
    }


def _per_map(maps: np.ndarray) -> np.ndarray:
    """``[B, K, ...]`` -> ``[B·K, ...]``: one map per input and target."""
    return maps.reshape(-1, *maps.shape[2:])


def comparison_maps(expl) -> tuple[np.ndarray, np.ndarray]:
    """``(signed, magnitude)`` maps ``[B, K, ...]`` the randomisation test compares.

    Image attributions ``[B, K, H, W, C]``: ``Σ_c a`` and ``Σ_c |a|`` (Adebayo et al.'s diverging
    and absolute-value visualisations); CAM maps and non-image attributions: ``a`` and ``|a|``.
    """
    attributions = np.asarray(expl.attributions, dtype=np.float64)
    if attributions.ndim == 5:  # [B, K, H, W, C] pixel attributions of images
        return attributions.sum(axis=-1), np.abs(attributions).sum(axis=-1)
    return attributions, np.abs(attributions)


def clone_with_weights(model):
    """A checked deep copy of ``model`` (nested models cloned too) holding the same state
    (:func:`saliency_kit.model.copy.copy_model`)."""
    from .model.copy import copy_model

    try:
        return copy_model(model, what="randomisation copy")
    except ValueError as error:
        raise ValueError(
            f"randomization_test needs a copy of the model to re-initialise: {error}"
        ) from error


def weighted_layers(model) -> list[tuple[str, object]]:
    """``(path, layer)`` of every layer that has weights, in the model's order, nested models expanded.

    Paths of layers in nested models are ``"outer/inner"``.
    """
    from .model.layers import weighted_layers as walk_weighted

    return walk_weighted(model)


def _select_layers(all_layers, layers):
    if layers is None:
        return list(all_layers)
    if isinstance(layers, str):
        layers = [layers]
    chosen = set()
    for name in layers:
        hits = [p for p, _ in all_layers if p == name or p.startswith(f"{name}/") or p.split("/")[-1] == name]
        if not hits:
            raise ValueError(
                f"layer {name!r} is not a weighted layer of the model; weighted layers are: "
                + ", ".join(p for p, _ in all_layers) + f"; received {name!r}."
            )
        chosen.update(hits)
    return [(p, layer) for p, layer in all_layers if p in chosen]


# variable name -> initializer attributes that may hold its initializer (besides "<name>_initializer")
_INITIALIZER_ATTRS = {
    "kernel": ("kernel_initializer", "depthwise_initializer"),
    "depthwise_kernel": ("depthwise_initializer",),
    "pointwise_kernel": ("pointwise_initializer",),
    "recurrent_kernel": ("recurrent_initializer",),
}


def reinitialize(layer, *, seed: int = 0, salt: int = 0) -> None:
    """Re-draw every weight of ``layer`` from its own initializer, reseeded from ``(seed, salt)``.

    The initializer of a variable named ``v`` is the ``v_initializer`` attribute of the (sub)layer
    that owns it (``kernel_initializer``, ``bias_initializer``, ``gamma_initializer``,
    ``moving_variance_initializer``, ...; depthwise and recurrent kernels included). A variable with
    no initializer to be found gets Glorot-uniform (2-D and up) or zeros.
    """
    import keras

    from .model import keras_private

    owners = [layer, *keras_private.all_sublayers(layer)]
    for i, variable in enumerate(layer.weights):
        init = _initializer_for(owners, variable)
        var_seed = int(np.random.SeedSequence([seed, salt, i]).generate_state(1)[0] % (2**31 - 1))
        if init is None:
            init = keras.initializers.GlorotUniform() if len(variable.shape) >= 2 else keras.initializers.Zeros()
        variable.assign(_reseeded(init, var_seed)(shape=tuple(variable.shape), dtype=variable.dtype))


def _initializer_for(owners, variable):
    name = variable.name.split("/")[-1].split(":")[0]
    attrs = (*_INITIALIZER_ATTRS.get(name, ()), f"{name}_initializer")
    holders = [o for o in owners if any(w is variable for w in o.weights)]
    for owner in reversed(holders):  # the deepest owner first
        for attr in attrs:
            init = getattr(owner, attr, None)
            if init is not None:
                return init
    return None


def _reseeded(init, seed: int):
    import keras

    if isinstance(init, keras.initializers.Initializer):
        config = init.get_config()
        if "seed" in config:
            return type(init).from_config({**config, "seed": seed})
    return init


# --------------------------------------------------------------------------------------------
# Deletion and insertion (RISE, Petsiuk et al. 2018)
# --------------------------------------------------------------------------------------------
def deletion_insertion(
    model,
    inputs,
    explanation,
    *,
    steps: int = 32,
    baseline="zeros",
    blur_sigma: float = 5.0,
    score: str = "output",
    batch_size: int = 32,
    seed: int = 0,
    max_batch_bytes: int = 256 * 2**20,
) -> dict:
    """RISE's deletion and insertion curves of each input and target of ``explanation``.

    Pixels are ranked by ``explanation.maps`` in decreasing order (ties broken in a seeded random
    order, so flat regions are not visited in raster order). At step ``i`` of ``steps`` the top
    ``round(i·H·W/steps)`` pixels (all channels) are

    - *deletion*: replaced by ``baseline`` in the image (score should drop fast: low AUC is good);
    - *insertion*: copied from the image into a blurred copy of it (``scipy.ndimage.gaussian_filter``
      per channel with ``blur_sigma``; score should rise fast: high AUC is good).

    The same two curves with a random pixel order (seeded, one order per input) are the baseline a
    map must beat. Every perturbed image is scored through the engine's batched
    ``forward_scores``: ``score="output"`` (default) scores the model's output as it is, i.e. the
    softmax probability of the target class for a classifier ending in softmax, as RISE does;
    ``score="logits"`` scores the values before the softmax.

    Args:
        model: the model that was explained.
        inputs: ``[B, H, W, C]`` model inputs the explanation was computed on.
        explanation: an :class:`saliency_kit.Explanation` with ``maps [B, K, H, W]`` and ``targets``.
        steps: evaluations per curve minus one (the curve has ``steps + 1`` points, 0 % to 100 %).
        baseline: ``"zeros"``, ``"blur"`` (the blurred image), a scalar, or an array broadcastable
            to ``inputs`` (e.g. one ``[H, W, C]`` image).
        blur_sigma: σ in pixels of the insertion start image.
        score, batch_size: passed to ``forward_scores``.
        seed: seed of the random order and of the tie-breaking.
        max_batch_bytes: the perturbed images of several inputs are built and scored together, up
            to about this many bytes at a time.

    Returns:
        A dict of NumPy arrays: ``fractions [S+1]`` (fraction of pixels changed at each step),
        ``deletion_curve``, ``insertion_curve``, ``random_deletion_curve``,
        ``random_insertion_curve`` ``[B, K, S+1]``; ``deletion_auc``, ``insertion_auc``,
        ``random_deletion_auc``, ``random_insertion_auc`` ``[B, K]`` (trapezoid rule over fractions).
    """
    from .engine import forward_scores

    x = np.asarray(inputs, dtype=np.float32)
    maps = np.asarray(explanation.maps)
    tgt = np.asarray(explanation.targets)
    if x.ndim != 4:
        raise ValueError(f"deletion_insertion needs image inputs [B, H, W, C]; received shape {x.shape}.")
    batch, height, width, _ = x.shape
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
    n_targets = maps.shape[1]
    n_pixels = height * width

    blurred = np.stack([ndimage.gaussian_filter(img, sigma=(blur_sigma, blur_sigma, 0)) for img in x])
    base = _baseline(baseline, x, blurred)
    counts = np.rint(np.arange(steps + 1) * n_pixels / steps).astype(np.int64)
    fractions = counts / n_pixels
    rng = np.random.default_rng(seed)

    rows_per_input = (2 * n_targets + 2) * (steps + 1)
    per_input_bytes = rows_per_input * x[0].nbytes
    chunk = max(1, int(max_batch_bytes // max(per_input_bytes, 1)))
    curves = {name: np.zeros((batch, n_targets, steps + 1)) for name in _CURVES}
    for start in range(0, batch, chunk):
        images, positions = [], []
        for b in range(start, min(start + chunk, batch)):
            ranks = [_ranks(maps[b, k], rng) for k in range(n_targets)]
            random_rank = rng.permutation(n_pixels)
            firsts = [(counts[:, None] > r[None, :]).reshape(steps + 1, height, width, 1) for r in ranks]
            rand_first = (counts[:, None] > random_rank[None, :]).reshape(steps + 1, height, width, 1)
            for k, first in enumerate(firsts):
                images.append(np.where(first, base[b], x[b]))
                positions.append(("deletion_curve", b, k))
                images.append(np.where(first, x[b], blurred[b]))
                positions.append(("insertion_curve", b, k))
            images.append(np.where(rand_first, base[b], x[b]))
            positions.append(("random_deletion_curve", b, None))
            images.append(np.where(rand_first, x[b], blurred[b]))
            positions.append(("random_insertion_curve", b, None))
        stacked = np.concatenate(images).astype(x.dtype, copy=False)
        row_targets = np.concatenate([np.tile(tgt[b], (steps + 1, 1)) for _, b, _ in positions])
        scores = np.asarray(forward_scores(model, stacked, row_targets, score=score, batch_size=batch_size))
        scores = scores.reshape(len(positions), steps + 1, n_targets)
        for (name, b, k), s in zip(positions, scores):
            if k is None:
                curves[name][b] = s.T  # random order: one set of images scored for every target
            else:
                curves[name][b, k] = s[:, k]

    result = {"fractions": fractions, **curves}
    for name in _CURVES:
        result[name.replace("_curve", "_auc")] = metrics.trapezoid_auc(curves[name], fractions)
    return result


_CURVES = ("deletion_curve", "insertion_curve", "random_deletion_curve", "random_insertion_curve")


def _ranks(m, rng) -> np.ndarray:
    """Rank of every pixel (0 = most important) by decreasing value, ties in random order, NaN last."""
    values = np.nan_to_num(np.asarray(m, dtype=np.float64).ravel(), nan=-np.inf)
    order = np.lexsort((rng.random(values.size), -values))
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[order] = np.arange(values.size)
    return ranks


def _baseline(baseline, x, blurred) -> np.ndarray:
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


# --------------------------------------------------------------------------------------------
# Pointing game (Zhang et al. 2016)
# --------------------------------------------------------------------------------------------
def pointing_game(explanation, masks, *, tolerance: float = 0) -> np.ndarray:
    """Whether each map's maximum falls on the object: bool ``[B, K]``.

    Args:
        explanation: an :class:`saliency_kit.Explanation` (its ``maps [B, K, H, W]`` are used) or
            an array of maps ``[B, K, H, W]``.
        masks: bool ``[B, H, W]``, the object of each input.
        tolerance: a hit may miss the object by up to this many pixels (Euclidean distance; the mask
            is dilated with ``scipy.ndimage.distance_transform_edt``).

    Ties: when several pixels share a map's maximum, it is a hit only if *all* of them are on the
    (dilated) object, so a flat map (e.g. all zeros) cannot score. Non-finite map values are ignored.
    """
    maps = np.asarray(getattr(explanation, "maps", explanation))
    masks = np.asarray(masks)
    if maps.ndim != 4:
        raise ValueError(f"maps must be [B, K, H, W]; received shape {maps.shape}.")
    if masks.shape != (maps.shape[0], *maps.shape[2:]):
        raise ValueError(
            f"masks must be bool [B, H, W] = {(maps.shape[0], *maps.shape[2:])} to match the maps; received shape "
            f"{masks.shape}."
        )
    if masks.dtype != bool:
        raise TypeError(f"masks must be boolean (True on the object); received dtype {masks.dtype}.")
    hits = np.zeros(maps.shape[:2], dtype=bool)
    for b in range(maps.shape[0]):
        region = metrics.dilate(masks[b], tolerance)
        for k in range(maps.shape[1]):
            hits[b, k] = metrics.points_at(maps[b, k], region)
    return hits
