"""SmoothGrad (Smilkov et al. 2017): a pixel method averaged over noisy copies of each input.

``a = agg_s base(x + ε_s)``, ``ε_s ~ N(0, σ²)``, ``σ = noise · (max x − min x)`` per input, with
``agg`` the mean, the mean of squares (``"square"``) or the variance. The noise of sample ``s``
of input ``b`` is drawn from a stateless generator keyed by ``(seed, b, s)``, so a seed fixes the
result whatever ``batch_size`` is. The map is reduced like the base method's.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ._base import REGISTRY, Method, Request, Result, check_choice, check_positive_int, register
from .gradients import RECIPES, run_recipe

AGGREGATES = ("mean", "square", "variance")
DEFAULTS = {"base": "gradient", "samples": 50, "noise": 0.15, "aggregate": "mean", "seed": None}


def _settings(request: Request, options: dict):
    """``(recipe, resolved options, seed)`` from checked options (a seed is drawn if None)."""
    base = check_choice("base", options["base"], tuple(RECIPES))
    base_options = REGISTRY[base].options({k: v for k, v in options.items() if k not in DEFAULTS})
    samples = check_positive_int("samples", options["samples"])
    aggregate = check_choice("aggregate", options["aggregate"], AGGREGATES)
    noise = options["noise"]
    if isinstance(noise, bool) or not isinstance(noise, (int, float, np.floating)) or not 0 <= noise < np.inf:
        raise ValueError(f"noise must be a non-negative number (a fraction of max − min); received {noise!r}.")
    seed = options["seed"]
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))
    elif isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int or None; received {seed!r}.")
    recipe = RECIPES[base](request, base_options)
    plan = dataclasses.replace(recipe.plan, samples=samples, noise=float(noise), aggregate=aggregate)
    resolved = {**options, **base_options, "seed": int(seed)}
    return dataclasses.replace(recipe, plan=plan), resolved, int(seed)


def check(request: Request, **options) -> None:
    _settings(request, options)


def compute(request: Request, **options) -> Result:
    recipe, resolved, seed = _settings(request, options)
    return run_recipe(request, recipe, resolved, seed=seed)


class _SmoothGradMethod(Method):
    def options(self, given: dict, extra_allowed: tuple = ()) -> dict:
        base = given.get("base", DEFAULTS["base"])
        extra = tuple(REGISTRY[base].defaults) if base in RECIPES else ()
        return super().options(given, extra_allowed=extra)


register(
    _SmoothGradMethod(
        "smoothgrad",
        "a pixel method (base=...) aggregated over noisy copies of the input (Smilkov et al. 2017); "
        "map: as the base method",
        compute,
        defaults=dict(DEFAULTS),
        check=check,
    )
)
