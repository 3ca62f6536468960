"""Plain gradient methods: the gradient, gradient × input, guided backprop and deconvnet.

Guided backprop and deconvnet are the gradient taken through ``sk.rewrite(model, rule)``: the
difference between the four methods is one rule and one multiplication.
"""
from __future__ import annotations

from dataclasses import dataclass


from .. import engine
from ._base import Method, Request, Result, reduce_map, register


@dataclass(frozen=True)
class Recipe:
    """How a gradient-based pixel method asks the engine for its attributions.

    SmoothGrad reuses a base method's recipe, adding noise and samples to ``plan``.
    """

    plan: engine.GradientPlan
    rule: object = None
    baseline: object = 0.0
    reduction: str = "abs_max"


def run_recipe(request: Request, recipe: Recipe, options: dict, seed: int = 0) -> Result:
    """Run ``recipe`` on the engine and reduce its attributions to maps."""
    attributions, scores, _ = engine.gradients(
        request.model,
        request.inputs,
        request.targets,
        recipe.plan,
        rule=recipe.rule,
        seed=seed,
        baseline=recipe.baseline,
        **request.view_args,
    )
    return Result(attributions, reduce_map(attributions, recipe.reduction), scores, options)


def _register_gradient_method(name, summary, *, multiply="none", rule=None, reduction="abs_max"):
    def recipe(request: Request, options: dict) -> Recipe:
        return Recipe(engine.GradientPlan(multiply=multiply), rule, 0.0, reduction)

    def compute(request: Request, **options) -> Result:
        return run_recipe(request, recipe(request, options), options)

    method = register(Method(name, summary, compute))
    RECIPES[name] = recipe
    return method


# name -> recipe(request, options): the pixel methods SmoothGrad can wrap
RECIPES: dict = {}

_register_gradient_method(
    "gradient",
    "∂score/∂input (Simonyan et al. 2014); map: max |gradient| over the last axis",
)
_register_gradient_method(
    "gradient_x_input",
    "input × gradient; map: sum over the last axis",
    multiply="input",
    reduction="sum",
)
_register_gradient_method(
    "guided_backprop",
    "gradient through ReLUs that pass only positive gradients of active units (Springenberg et al. 2015); "
    "map: max |attribution| over the last axis",
    rule="guided",
)
_register_gradient_method(
    "deconvnet",
    "gradient through ReLUs that pass only positive gradients (Zeiler & Fergus 2014); "
    "map: max |attribution| over the last axis",
    rule="deconv",
)

__all__ = ["Recipe", "RECIPES", "run_recipe"]
