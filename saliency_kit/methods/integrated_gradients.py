"""Integrated gradients (Sundararajan et al. 2017) and its quadrature rules.

``a = (x − x′) · Σ_i w_i ∂s/∂x (x′ + α_i (x − x′))`` with points ``α_i`` on [0, 1] whose weights
sum to 1, so that for a linear score the attributions are exact for every rule. The completeness
gap ``Σ a − (s(x) − s(x′))`` measures the quadrature error. Map: signed sum over the last axis.
"""
from __future__ import annotations

import numpy as np

from .. import engine
from ._base import Method, Request, Result, check_choice, check_positive_int, reduce_map, register
from .gradients import RECIPES, Recipe

RULES = ("riemann_trapezoid", "riemann_left", "riemann_right", "riemann_middle", "gausslegendre")


def quadrature(rule: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(alphas, weights)``: ``steps`` points on [0, 1] and weights summing to 1.

    Riemann left/right/middle: the left ends, right ends or midpoints of ``steps`` equal
    intervals, weight ``1/steps`` each. Trapezoid: ``steps`` evenly spaced points including both
    ends (``steps ≥ 2``), end weights halved. Gauss–Legendre: the Legendre nodes mapped to [0, 1].
    """
    check_choice("rule", rule, RULES)
    steps = check_positive_int("steps", steps)
    if rule == "riemann_trapezoid":
        if steps < 2:
            raise ValueError("rule='riemann_trapezoid' needs steps >= 2; received steps=1.")
        alphas = np.linspace(0.0, 1.0, steps)
        weights = np.full(steps, 1.0 / (steps - 1))
        weights[[0, -1]] /= 2.0
    elif rule == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(steps)
        alphas, weights = (nodes + 1.0) / 2.0, weights / 2.0
    else:
        offset = {"riemann_left": 0.0, "riemann_right": 1.0, "riemann_middle": 0.5}[rule]
        alphas = (np.arange(steps) + offset) / steps
        weights = np.full(steps, 1.0 / steps)
    return alphas, weights


def _baseline(request: Request, baseline) -> np.ndarray:
    shape = request.inputs.shape[1:]
    try:
        value = np.asarray(baseline, dtype=np.float64)
        value = np.broadcast_to(value, shape)
    except (ValueError, TypeError):
        raise ValueError(
            f"baseline must be a number or an array broadcastable to one input {shape}; "
            f"received {np.shape(baseline)}."
        ) from None
    return value.astype(request.inputs.dtype)


def recipe(request: Request, options: dict) -> Recipe:
    alphas, weights = quadrature(options["rule"], options["steps"])
    plan = engine.GradientPlan(alphas=tuple(alphas), weights=tuple(weights), multiply="path")
    return Recipe(plan, None, _baseline(request, options["baseline"]), "sum")


def compute(request: Request, **options) -> Result:
    plan = recipe(request, options)
    attributions, scores, at_baseline = engine.gradients(
        request.model, request.inputs, request.targets, plan.plan, baseline=plan.baseline, **request.view_args
    )
    result = Result(attributions, reduce_map(attributions, plan.reduction), scores, options)
    if at_baseline is None:  # the rule's points exclude α = 0: one forward pass of the baseline
        baseline = plan.baseline[None]
        at_baseline = engine.all_scores(request.model, baseline, **request.view_args)[0][request.targets]
    change = result.scores - at_baseline
    total = result.attributions.reshape(*result.attributions.shape[:2], -1).sum(axis=-1, dtype=np.float64)
    result.completeness_gap = (total - change).astype(np.float32)
    return result


def check(request: Request, **options) -> None:
    recipe(request, options)


register(
    Method(
        "integrated_gradients",
        "(x − baseline) × path-averaged gradient (Sundararajan et al. 2017), with completeness_gap; "
        "map: sum over the last axis",
        compute,
        defaults={"steps": 50, "baseline": 0.0, "rule": "riemann_trapezoid"},
        check=check,
    )
)
RECIPES["integrated_gradients"] = recipe
