"""SquareGrad and VarGrad: SmoothGrad's ``aggregate="square"`` and ``"variance"`` under their own
names (Hooker et al. 2019; Adebayo et al. 2018), as Xplique names them.

* ``squaregrad``: ``a = (1/S) Σ_s base(x + ε_s)²``
* ``vargrad``: ``a = (1/S) Σ_s base(x + ε_s)² − ((1/S) Σ_s base(x + ε_s))²``

Options as smoothgrad's (``base``, ``samples``, ``noise``, ``seed``, and the base method's own),
but not ``aggregate``, which the name fixes. Map: as the base method.
"""
from __future__ import annotations

from . import smoothgrad
from ._base import Request, Result, register

DEFAULTS = {k: v for k, v in smoothgrad.DEFAULTS.items() if k != "aggregate"}


def _shortcut(name: str, aggregate: str, summary: str):
    def compute(request: Request, **options) -> Result:
        result = smoothgrad.compute(request, **options, aggregate=aggregate)
        result.options.pop("aggregate", None)
        return result

    def check(request: Request, **options) -> None:
        smoothgrad.check(request, **options, aggregate=aggregate)

    register(smoothgrad._SmoothGradMethod(name, summary, compute, defaults=dict(DEFAULTS), check=check))


_shortcut("squaregrad", "square", "SmoothGrad with the mean of squares (SquareGrad, Hooker et al. 2019); map: as the base method")
_shortcut("vargrad", "variance", "SmoothGrad with the variance (VarGrad, Adebayo et al. 2018); map: as the base method")
