"""SquareGrad and VarGrad: SmoothGrad's ``aggregate="square"`` and ``"variance"`` under their own
names (Hooker et al. 2019; Adebayo et al. 2018), as Xplique names them.

* ``squaregrad``: ``a = (1/S) Σ_s base(x + ε_s)²``
* ``vargrad``: ``a = (1/S) Σ_s base(x + ε_s)² − ((1/S) Σ_s base(x + ε_s))²``

Options as smoothgrad's (``base``, ``samples``, ``noise``, ``seed``, and the base method's own),
but not ``aggregate``, which the name fixes. Map: as the base method.
"""
from __future__ import annotations

from . import smoothgrad
from .base import _REGISTRY, register

# smoothgrad is registered (the built-ins import in order); reading the registry directly keeps
# get() from loading plugins in the middle of the built-ins
OPTIONS = [option for option in _REGISTRY["smoothgrad"].options if option.name != "aggregate"]


def _shortcut(name: str, title: str, aggregate: str, summary: str):
    def compute(ctx, **options):
        return smoothgrad.smoothgrad(ctx, aggregate=aggregate, **options)

    register(name, title=title, summary=summary, options=OPTIONS, extends="base", noisy=True,
             prepare=smoothgrad.prepare, cost=smoothgrad.cost)(compute)


_shortcut("squaregrad", "SquareGrad", "square",
          "SmoothGrad with the mean of squares (SquareGrad, Hooker et al. 2019); map: as the base method")
_shortcut("vargrad", "VarGrad", "variance",
          "SmoothGrad with the variance (VarGrad, Adebayo et al. 2018); map: as the base method")
