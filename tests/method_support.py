"""Shared by the tests: the one table of small settings every method runs with wherever a test
runs many methods (the engine's shared-properties table, model kinds, target kinds, mixed and half
precision), and the engine's seeded draws reproduced from their documented keys by
``draws_reference`` (not through saliency_kit); and a layer that counts forward passes."""

import keras
import numpy as np
from draws_reference import normal_draws as normal_reference
from draws_reference import uniform_draws as uniform_reference

# Small settings for the methods that take many evaluations (any method not listed runs with its
# defaults; tests/methods/test_base.py checks every long option of every method is shortened here);
# the expected_gradients baselines are added per input shape by `small_options`.
SMALL = {
    "integrated_gradients": {"steps": 8},
    "conductance": {"steps": 4},
    "smoothgrad": {"samples": 6, "seed": 3},
    "occlusion": {"window": 4, "stride": 4},
    "squaregrad": {"samples": 4, "seed": 3},
    "vargrad": {"samples": 4, "seed": 3},
    "expected_gradients": {"samples": 4, "seed": 3},
    "blur_ig": {"steps": 4, "max_sigma": 3.0},
    "guided_ig": {"steps": 4},
    "xrai": {"steps": 4},
    "rise": {"masks": 16, "cells": 3, "seed": 3},
}

# Small settings for the metrics that take many evaluations (every other declared metric runs with
# its defaults).
CHEAP_METRICS = {
    "faithfulness_correlation": {"nr_runs": 8, "subset_size": 20},
    "infidelity": {"perturb_patch_sizes": [2, 4]},
    "road": {"percentages": [10, 50, 90]},
    "monotonicity_correlation": {"nr_samples": 3, "features_in_step": 16, "perturb_baseline": "uniform"},
    "region_perturbation": {"patch_size": 2, "regions_evaluation": 6, "order": "random"},
    "pixel_flipping": {"features_in_step": 24},
    "max_sensitivity": {"nr_samples": 4},
    "avg_sensitivity": {"nr_samples": 4, "return_nan_when_prediction_changes": True},
    "relative_input_stability": {"nr_samples": 4},
    "random_logit": {},
    "completeness": {},
    "non_sensitivity": {"features_in_step": 8},
    "input_invariance": {},
}


def input_methods() -> list:
    """The registered methods whose attributions are of the inputs of any model (every one but
    those attributing to an inner layer, conductance, which the tests of layers run, and those
    reading a transformer's attention, which tests/methods/test_attention_methods.py runs)."""
    from saliency_kit import methods

    return [name for name in methods.names() if not methods.get(name).layered and not methods.get(name).attention]


def small_options(method: str, input_shape: tuple, seed: int = 7) -> dict:
    """``SMALL[method]`` (``{}`` if absent), with expected_gradients' reference inputs
    ``[2, *input_shape]`` drawn for the input shape."""
    options = dict(SMALL.get(method, {}))
    if method == "expected_gradients":
        options["baselines"] = np.random.default_rng(seed).uniform(-1, 1, (2, *input_shape)).astype("float32")
    return options


def normal_draws(seed: int, key: int, count: int, samples, shape, dtype="float32") -> np.ndarray:
    """``[len(samples), *shape]``: the standard normal noise of copies ``samples`` of the input with
    noise key ``key`` (its position, or its ``input_keys`` entry), as documented for
    ``ctx.normal``: keyed by ``(seed, key, s)`` (``count`` is not part of the key), reproduced
    by ``draws_reference`` without saliency_kit."""
    return normal_reference(seed, key, samples, shape).astype(dtype)


def uniform_draws(seed: int, key, count: int, samples, shape, dtype="float32") -> np.ndarray:
    """``[len(samples), *shape]``: uniform draws as documented for ``ctx.uniform``: keyed by
    ``(seed, key, s)`` for the input with noise key ``key``, or by ``(seed, s)`` in their own stream
    for draws shared by every input (``key=None``); multiples of ``2^-24`` (``2^-11`` in float16)."""
    bits = 11 if np.dtype(dtype) == np.float16 else 24
    return uniform_reference(seed, key, samples, shape, bits).astype(dtype)


class ForwardCounter(keras.layers.Layer):
    """Identity that counts how many times the forward pass runs (at run time, not trace time)."""

    def build(self, input_shape):
        self.runs = self.add_weight(shape=(), initializer="zeros", trainable=False, dtype="int64")

    def call(self, x):
        self.runs.assign_add(1)
        return x
