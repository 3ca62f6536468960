"""DeepLIFT with the Rescale rule (Shrikumar et al. 2017).

``a = (x − x′) · m``, ``m`` the multipliers of a backward pass through
``rewrite_deeplift(model)`` run on the inputs and their baseline together: every ReLU-family
activation passes ``(f(x) − f(x′)) / (x − x′)``, max pooling Captum's rule, linear layers their
weights. Summation to delta: ``Σ a = s(x) − s(x′)``; ``completeness_gap`` reports
``Σ a − (s(x) − s(x′))``. Map: signed sum over the last axis.

The baseline is one row (an input; with ``attribute_to=LAYER`` the layer's output), so it runs
through the model once per call, on its own: one row forward, no backward
(``ctx.gradients_against``). When the model's other inputs are held at each row's own values (a
request explaining some of several inputs), every input is paired with its own reference
instead (``2n`` rows).
"""

from __future__ import annotations

from typing import Any

from ._common import baseline_array, start_option
from .base import Request, register

__all__ = ["deeplift", "prepare"]


def prepare(request: Request, options: dict) -> dict:
    return {**options, "baseline": baseline_array(options["baseline"], request.inputs)}


@register(
    "deeplift",
    title="DeepLIFT",
    summary="(x − baseline) × DeepLIFT Rescale multipliers (Shrikumar et al. 2017), with completeness_gap; "
    "map: sum over the last axis",
    options=[start_option("the reference")],
    reduce="sum",
    signed=True,
    prepare=prepare,
    cost=lambda options: 1,  # the shared baseline is one row per call
)
def deeplift(ctx: Any, baseline: Any) -> Any:
    from keras import ops

    from ..propagation.deeplift import DeepLiftRewrite
    from ..propagation.gates import SharedReference

    x = ctx.inputs
    reference = ops.broadcast_to(ops.cast(baseline, x.dtype), x.shape[1:])  # one input, shared by every row
    scores, reference_scores, multipliers = ctx.gradients_against(
        reference, rule=DeepLiftRewrite(), shared=SharedReference
    )  # [n, K], [n, K], [n, K, *input]
    attributions = (x - reference)[:, None] * multipliers
    total = ops.sum(ops.reshape(ops.cast(attributions, "float64"), [*attributions.shape[:2], -1]), axis=-1)
    gap = total - ops.cast(scores - reference_scores, "float64")
    return {"attributions": attributions, "completeness_gap": gap, "scores": scores}
