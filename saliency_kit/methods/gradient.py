"""Plain gradient methods, one formula each: the gradient, gradient × input, guided backprop and
deconvnet.

* gradient (Simonyan et al. 2014): ``∂s/∂x``
* gradient × input: ``x · ∂s/∂x``
* guided backprop (Springenberg et al. 2015): ``∂s/∂x`` through ``sk.rewrite(model, "guided")``
* deconvnet (Zeiler & Fergus 2014): ``∂s/∂x`` through ``sk.rewrite(model, "deconv")``
"""

from __future__ import annotations

from typing import Any

from .base import register

__all__ = ["gradient", "gradient_x_input", "guided_backprop", "deconvnet"]


@register(
    "gradient", title="Gradient", summary="∂score/∂input (Simonyan et al. 2014); map: max |gradient| over the last axis"
)
def gradient(ctx: Any) -> Any:
    return ctx.gradients(ctx.inputs)


@register(
    "gradient_x_input",
    title="Gradient × Input",
    reduce="sum",
    signed=True,
    summary="input × gradient; map: sum over the last axis",
)
def gradient_x_input(ctx: Any) -> Any:
    return ctx.inputs[:, None] * ctx.gradients(ctx.inputs)


@register(
    "guided_backprop",
    title="Guided Backprop",
    summary="gradient through ReLUs that pass only positive gradients of active units "
    "(Springenberg et al. 2015); map: max |attribution| over the last axis",
)
def guided_backprop(ctx: Any) -> Any:
    return ctx.gradients(ctx.inputs, rule="guided")


@register(
    "deconvnet",
    title="Deconvnet",
    summary="gradient through ReLUs that pass only positive gradients (Zeiler & Fergus 2014); "
    "map: max |attribution| over the last axis",
)
def deconvnet(ctx: Any) -> Any:
    return ctx.gradients(ctx.inputs, rule="deconv")
