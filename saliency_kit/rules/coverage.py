"""What a rule pass reached: the report every backend's op-level ReLU-rule passes fill in
(TensorFlow's ``model.override.OverrideReport``, JAX's and PyTorch's ``RuleReport``), and the
one error they give when the rule could not reach every ReLU-family operation. No framework is
imported."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from .relu import ModifiedBackprop, ReluFamily

__all__ = ["RuleCoverage", "FamilyCoverage"]


@dataclasses.dataclass
class RuleCoverage:
    """The operations a rule pass gave ``rule``, and those it could not.

    ``ops``: one name per ReLU-family operation whose gradient now follows the rule.
    ``unreached``: one line per nested function holding ReLU-family operations the rule could not
    reach. ``unsupported``: one line per activation made of several operations whose parameters
    are not constants. ``complete``: neither happened. ``plain``: activations built from ReLUs that
    are not of the family (a PReLU's learned slope) and keep their plain gradient, as at the layer
    level. A backend's report adds ``families`` (the activation each of ``ops`` computes) and
    :attr:`WHERE`, how its users keep activations where the pass reaches them.
    """

    rule: ModifiedBackprop
    ops: list = dataclasses.field(default_factory=list)
    unreached: list = dataclasses.field(default_factory=list)
    unsupported: list = dataclasses.field(default_factory=list)
    plain: list = dataclasses.field(default_factory=list)

    #: the end of the error's advice: where activations must not be computed on this backend
    WHERE: ClassVar[str] = "not inside a separately compiled function"

    @property
    def complete(self) -> bool:
        return not self.unreached and not self.unsupported

    def check(self, what: str) -> None:
        """``ValueError`` naming ``what`` (e.g. ``"layer 'block'"``) unless the rule reached every
        ReLU-family operation."""
        if self.complete:
            return
        problems = "; ".join(self.unreached + self.unsupported)
        raise ValueError(
            f"cannot apply {type(self.rule).__name__} to every ReLU of {what}: {problems}. Its map "
            "would silently mix plain and modified gradients; compute these activations with "
            "keras.activations.relu / keras.layers.ReLU (constant parameters) in the model's own "
            f"graph, {self.WHERE}; received {what}."
        )


@dataclasses.dataclass
class FamilyCoverage(RuleCoverage):
    """The report of an op-level pass that rebuilds activations itself (JAX's, PyTorch's): ``ops``
    are readable lines (``"relu at dense"``, ``"leaky_relu(negative_slope=0.2) at act"``),
    ``families`` the :class:`~saliency_kit.rules.ReluFamily` of each, in the same order; emptied
    before each trace or call (:meth:`clear`)."""

    families: list = dataclasses.field(default_factory=list)

    def clear(self) -> None:
        for entries in (self.ops, self.families, self.unreached, self.unsupported, self.plain):
            entries.clear()

    def took(self, family: ReluFamily, where: str) -> None:
        """Record that the activation ``family`` at ``where`` now follows the rule."""
        self.ops.append(f"{_label(family)} at {where}")
        self.families.append(family)


def _label(family: ReluFamily) -> str:
    if family.negative_slope and family.max_value is None and family.threshold == 0.0:
        return f"leaky_relu(negative_slope={family.negative_slope})"
    return family.name
