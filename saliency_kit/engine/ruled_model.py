"""``sk.rewrite(model, rule)`` with a ReLU-family rule on JAX and PyTorch: a model that runs the
user's model unchanged and whose derivatives apply the rule at every ReLU-family operation it runs.

There is no copy of the layers: :class:`RuledModel` calls the original model inside the backend's
op-level rule pass, ``with_rule`` (:func:`saliency_kit.engine.jax_rules.with_rule` traces the call
and replaces the ReLU-family primitives of the traced program;
:func:`saliency_kit.engine.torch_rules.with_rule` runs it under a function mode that replaces
each ReLU-family call), hidden operations included (custom ``call`` methods, Lambdas, wrappers,
recurrent layers, subclassed models). The original is only called, so a gradient of it taken
before, after or at the same time stays plain; its weights are the original's own variables, so
later training is seen.
"""

from __future__ import annotations

from typing import Any

import keras

from ..model.copy import check_copy
from ..model.relu_layers import nothing_to_rewrite
from ..rules import as_rule

__all__ = ["RuledModel", "rewrite_relus"]


class RuledModel(keras.Model):
    """``model``'s outputs; their derivatives take ``rule`` at each ReLU-family operation.
    ``with_rule``: the backend's rule pass; ``report``: its report of the last call (or trace)."""

    def __init__(self, model: keras.Model, rule: Any, with_rule: Any, **kwargs: Any) -> None:
        super().__init__(name=kwargs.pop("name", f"{model.name}_{type(rule).__name__.lower()}"), **kwargs)
        self.original = model
        self.rule = rule
        self._ruled, self.report = with_rule(lambda inputs: model(inputs, training=False), rule)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        return self._ruled(inputs)

    def compute_output_spec(self, inputs: Any, training: bool | None = None) -> Any:
        return self.original.compute_output_spec(inputs)


def rewrite_relus(model: keras.Model, rule: Any, with_rule: Any) -> keras.Model:
    """The :class:`RuledModel` of ``model`` and ``rule`` (``"guided"``, ``"deconv"`` or a
    :class:`~saliency_kit.ModifiedBackprop`) under ``with_rule`` (the backend's rule pass),
    checked to compute ``model``'s outputs and to reach
    every ReLU-family operation (else ``ValueError`` naming what it could not reach); attributes
    ``rewritten_layers`` and ``rewritten_ops`` as on TensorFlow (the operations, e.g. ``"relu at
    dense"``)."""
    if not isinstance(model, keras.Model):
        raise TypeError(f"rewrite expects a keras.Model; received {type(model).__name__}.")
    ruled = RuledModel(model, as_rule(rule), with_rule)
    check_copy(model, ruled, what="rewrite")  # also traces it, filling in the report
    ruled.report.check(f"model {model.name!r}")
    if not ruled.report.ops:
        raise nothing_to_rewrite(model)
    ruled.rewritten_layers = list(ruled.report.ops)
    ruled.rewritten_ops = {model.name: list(ruled.report.ops)}
    return ruled
