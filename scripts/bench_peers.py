"""The side-by-side rows of ``scripts/bench_engine.py --peers``: the same work run through the
peers that have these methods, in the same process, on the same model and batch.

The model is given without a final softmax (a twin of the benchmark's model with the same
weights: ``logits_twin``), so every side explains the same logits.

* Score-CAM (``max_channels=C``: Faster-ScoreCAM) and LayerCAM against tf-keras-vis ``Scorecam``
  (``max_N=C``) and ``Layercam``, on the same layer (``seek_penultimate_conv_layer=False``: the
  layer named, not a convolution before it);
* Blur IG, Guided IG and XRAI against PAIR's ``saliency.core`` (``BlurIG``, ``GuidedIG``,
  ``XRAI``), one image at a time as its API takes them, its ``call_model_function`` a compiled
  ``tf.function`` (the fastest way to feed it); XRAI with the same base attributions;
* RISE against Xplique's ``Rise`` (the same number of masks, grid and keep probability; Xplique is
  installed without its TensorFlow pin, see the Makefile); the masks are random on both sides;
* LRP (``epsilon_plus_flat``) against Zennit's ``EpsilonPlusFlat`` (with ``SequentialMergeBatchNorm``),
  cross-framework: Zennit is PyTorch's, so it runs on an exact PyTorch twin of the same network with
  the same weights (``scripts/zennit_twin.py``; built once, outside the timed function), channels-last
  in and out. iNNvestigate, the Keras peer, pins tensorflow<2.15 and numpy<2.

Each row is ``our time / the peer's time`` (target ≤ 1.0: no row slower than the fastest peer
that computes the same numbers) and says whether the numbers are the same (``np.allclose`` with
``atol=1e-4`` of the largest attribution, as ``bench_inputs`` checks) or how far apart they are
and why. Nothing is downloaded; a peer that is not installed gives a row saying so.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np

ATOL = 1e-4

#: Where the Makefile installs Zennit, apart from site-packages: Quantus imports Zennit wherever it
#: finds it, and Zennit imports torchvision, which does not load beside the CPU build of PyTorch.
PEERS = os.path.join(sys.prefix, "peers")


def use_peer_installs() -> None:
    """Put the peers installed apart (:data:`PEERS`) on the import path, once."""
    if os.path.isdir(PEERS) and PEERS not in sys.path:
        sys.path.append(PEERS)


def same_numbers(ours: np.ndarray, theirs: np.ndarray) -> str:
    """``"yes (rel. diff …)"`` when ``ours`` and ``theirs`` agree to ``ATOL`` of the largest
    ``|theirs|``, else ``"NO (rel. diff …)"``."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    if ours.shape != theirs.shape:
        return f"NO (shapes {ours.shape} and {theirs.shape})"
    scale = float(np.abs(theirs).max()) or 1.0
    worst = float(np.abs(ours - theirs).max()) / scale
    return f"{'yes' if worst <= ATOL else 'NO'} (rel. diff {worst:.1e})"


class _NumpyWithOldQuantile:
    """PAIR's guided_ig calls ``np.quantile(..., interpolation=...)``, a keyword NumPy 2 removed;
    its module is given this stand-in, which renames it to ``method=``."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def quantile(a, q, interpolation="linear", **kwargs):
        return np.quantile(a, q, method=interpolation, **kwargs)


def logits_twin(model, size: int):
    """``keras.applications.ResNet50`` without its final softmax, with ``model``'s weights."""
    import keras

    twin = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    twin.set_weights(model.get_weights())
    return twin


def pair_call(model):
    """PAIR's ``call_model_function(x, args, keys)`` for class ``args["class"]``: the input
    gradients of one class's logit, from one compiled ``tf.function`` (traced once per batch
    shape)."""
    import tensorflow as tf
    from saliency import core

    @tf.function(reduce_retracing=True)
    def gradient(x, cls):
        with tf.GradientTape() as tape:
            tape.watch(x)
            score = model(x, training=False)[:, cls]
        return tape.gradient(score, x)

    def call(x, call_model_args=None, expected_keys=None):
        cls = tf.constant(call_model_args["class"], tf.int32)
        return {core.INPUT_OUTPUT_GRADIENTS: gradient(tf.constant(np.asarray(x, np.float32)), cls).numpy()}

    return call


#: Where a peer computes other numbers, what differs (each equality is tested where it holds).
DIFFERENCES = {
    "scorecam": "tf-keras-vis keeps the union of the batch's top channels (here: each input's own), "
    "and resizes by scipy zoom",
    "layercam": "equal on a layer of the input's size (tests); a 7×7 layer is resized here, by scipy zoom on "
    "their side, half-pixel bilinear on ours",
    "guided_ig": "equal with batch_size=1 (7.6e-8 at 224², float32): float32 convolutions of a batch of 8 round "
    "apart from PAIR's batches of 1, and each step's choice of features to move amplifies it",
    "rise": "random masks, drawn apart on each side: equal in expectation only; Xplique divides by each "
    "pixel's sum of masks, ours by N·p (the paper)",
    "blur_ig": "both take the blur's σ derivative as a finite difference (grad_step 0.01), which float32 "
    "rounds differently on each side; equal to 1e-4 on a float64 model (tests)",
    "lrp": "Zennit splits the residual Sum with a stabiliser (Norm: ±1e-6 in the denominator), ours splits Add "
    "exactly, and Zennit 0.5.1's merged BatchNorm keeps its ε (its 'identity' is x/√(1+ε)); with both aligned "
    "(zennit_lrp(aligned=True)) equal within 2e-6 (float32; python scripts/zennit_twin.py)",
}


def peer_runs(model, x, targets, *, layer: str, steps: int, channels: int, masks: int = 256) -> dict:
    """``{row: (ours, theirs, what)}``: two functions each returning attributions ``[B, ...]`` of
    column 0 of ``targets``, and the row's name; rows whose peer is missing are left out
    (:func:`missing_peers` names them)."""
    import saliency_kit as sk

    runs: dict = {}
    classes = [int(c) for c in targets[:, 0]]

    def ours(method, **options):
        return lambda: sk.explain(model, x, method, targets, batch_size=len(x), **options).attributions[:, 0]

    if importlib.util.find_spec("tf_keras_vis") is not None:
        from tf_keras_vis.layercam import Layercam
        from tf_keras_vis.scorecam import Scorecam
        from tf_keras_vis.utils.scores import CategoricalScore

        scorecam, layercam = Scorecam(model, clone=False), Layercam(model, clone=False)
        at = {"penultimate_layer": layer, "seek_penultimate_conv_layer": False, "normalize_cam": False}
        score = CategoricalScore(classes)
        runs["scorecam"] = (
            ours("scorecam", layer=layer, max_channels=channels),
            lambda: scorecam(score, x, penultimate_layer=layer, max_N=channels, batch_size=len(x), normalize_cam=False),
            f"scorecam, {channels} channels / tf-keras-vis Scorecam(max_N={channels})",
        )
        runs["layercam"] = (
            ours("layercam", layer=layer),
            lambda: layercam(score, x, **at),
            "layercam / tf-keras-vis Layercam",
        )
    if importlib.util.find_spec("saliency") is not None:
        import saliency.core.guided_ig as guided_module
        from saliency import core

        call = pair_call(model)
        blur, guided = core.BlurIG(), core.GuidedIG()
        baseline = np.zeros(x.shape[1:], np.float32)

        def pair_blur():
            return np.stack(
                [
                    blur.GetMask(image, call, {"class": c}, steps=steps, max_sigma=50.0, batch_size=steps)
                    for image, c in zip(x, classes)
                ]
            )

        def pair_guided():
            original, guided_module.np = guided_module.np, _NumpyWithOldQuantile()
            try:
                return np.stack(
                    [
                        guided.GetMask(image, call, {"class": c}, x_steps=steps, x_baseline=baseline, max_dist=0.02)
                        for image, c in zip(x, classes)
                    ]
                )
            finally:
                guided_module.np = original

        runs["blur_ig"] = (
            ours("blur_ig", steps=steps, max_sigma=50.0),
            pair_blur,
            f"blur_ig, {steps} steps / PAIR BlurIG",
        )
        runs["guided_ig"] = (
            ours("guided_ig", steps=steps, baseline=0.0, max_dist=0.02),
            pair_guided,
            f"guided_ig, {steps} steps / PAIR GuidedIG",
        )
    use_peer_installs()
    if importlib.util.find_spec("zennit") is not None and importlib.util.find_spec("torch") is not None:
        from zennit_twin import torch_twin, zennit_lrp

        twin = torch_twin(model)
        runs["lrp"] = (
            ours("lrp", composite="epsilon_plus_flat"),
            lambda: zennit_lrp(twin, x, classes, "epsilon_plus_flat"),
            "lrp epsilon_plus_flat / Zennit EpsilonPlusFlat on a PyTorch twin (cross-framework)",
        )
    if importlib.util.find_spec("xplique") is not None:
        from xplique.attributions import Rise

        rise = Rise(model, nb_samples=masks, grid_size=7, preservation_probability=0.5, batch_size=len(x) * 8)
        one_hot = np.eye(model.output.shape[-1], dtype=np.float32)[classes]
        runs["rise"] = (
            lambda: sk.explain(model, x, "rise", targets, batch_size=len(x) * 8, masks=masks, cells=7, p=0.5).maps[
                :, 0
            ],
            lambda: np.asarray(rise.explain(x, one_hot))[..., 0],  # [B, H, W, 1]
            f"rise, {masks} masks / Xplique Rise(nb_samples={masks})",
        )
    return runs


def xrai_runs(image: np.ndarray) -> dict:
    """``{"xrai": (ours, theirs, what)}`` on one image given the same base attributions (PAIR's
    ``XRAI`` takes one image; both return the region ranking's attribution map)."""
    if importlib.util.find_spec("saliency") is None:
        return {}
    from saliency.core import XRAI

    from saliency_kit.methods.xrai import felzenszwalb_segments, rank_regions

    image = image.astype(np.float64)
    attribution = np.random.default_rng(1).normal(size=image.shape)
    return {
        "xrai": (
            lambda: rank_regions(attribution.max(axis=-1), felzenszwalb_segments(image))[0],
            lambda: XRAI().GetMask(image, None, base_attribution=attribution),
            "xrai on one image, segments + ranking / PAIR XRAI",
        )
    }


def missing_peers(runs: dict) -> list[tuple[str, str]]:
    """``(method, why)`` for every method of the peers table without a row here."""
    why_missing = {
        "scorecam": "tf-keras-vis is not installed",
        "layercam": "tf-keras-vis is not installed",
        "blur_ig": "PAIR's saliency is not installed",
        "guided_ig": "PAIR's saliency is not installed",
        "xrai": "PAIR's saliency is not installed",
        "rise": "Xplique is not installed",
        "lrp": "Zennit (or PyTorch) is not installed: its row runs on a PyTorch twin of the network",
    }
    return [(method, why) for method, why in why_missing.items() if method not in runs]
