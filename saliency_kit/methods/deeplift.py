"""DeepLIFT with the Rescale rule (Shrikumar et al. 2017).

``a = (x − x′) · m``, ``m`` the multipliers of a backward pass through
``rewrite_deeplift(model)`` run on each input and its baseline together: every ReLU-family
activation passes ``(f(x) − f(x′)) / (x − x′)``, max pooling Captum's rule, linear layers their
weights. Summation to delta: ``Σ a = s(x) − s(x′)``; ``completeness_gap`` reports
``Σ a − (s(x) − s(x′))``. Map: signed sum over the last axis.
"""

from __future__ import annotations

from ._common import baseline_array
from .base import Option, register

__all__ = ["deeplift", "prepare"]


def prepare(request, options: dict) -> dict:
    return {**options, "baseline": baseline_array(options["baseline"], request.inputs)}


@register(
    "deeplift",
    title="DeepLIFT",
    summary="(x − baseline) × DeepLIFT Rescale multipliers (Shrikumar et al. 2017), with completeness_gap; "
    "map: sum over the last axis",
    options=[
        Option("baseline", 0.0, array=True, help="the reference input: a number or an array broadcastable to one input")
    ],
    reduce="sum",
    signed=True,
    prepare=prepare,
    cost=lambda options: 2,
)
def deeplift(ctx, baseline):
    from keras import ops

    from ..propagation.deeplift import DeepLiftRewrite

    x = ctx.inputs
    reference = baseline + 0 * x
    pairs = ops.stack([x, reference], axis=1)  # [n, 2, *input]: the rewrite pairs rows 2i, 2i+1
    scores, multipliers = ctx.gradients(pairs, rule=DeepLiftRewrite(), with_scores=True)  # [n, 2, K], [n, 2, K, ...]
    delta = x - reference
    attributions = delta[:, None] * multipliers[:, 0]
    total = ops.sum(ops.reshape(ops.cast(attributions, "float64"), [*attributions.shape[:2], -1]), axis=-1)
    gap = total - ops.cast(scores[:, 0] - scores[:, 1], "float64")
    return {"attributions": attributions, "completeness_gap": gap, "scores": scores[:, 0]}
