"""``sk.rewrite(model, rule)`` on the active backend (:mod:`.rewrite` on TensorFlow,
:mod:`saliency_kit.engine.ruled_model` and the LRP/DeepLIFT copies on JAX)."""

from __future__ import annotations

from typing import Any

import keras

from ..engine.backend import active

__all__ = ["rewrite"]


def rewrite(model: keras.Model, rule: Any) -> keras.Model:
    """A model computing ``model``'s outputs whose backward pass follows ``rule``.

    Args:
        model: a ``keras.Model`` (functional, Sequential, nested, or a built subclassed model);
            never modified.
        rule: ``"guided"``, ``"deconv"`` or a :class:`~saliency_kit.ModifiedBackprop` instance:
            applied at every ReLU-family operation the model runs (fused activations, ReLUs in a
            custom ``call``, Lambdas, wrappers, recurrent layers); or anything with a
            ``rewrite_model(model)`` method (an LRP composite, the DeepLIFT rewrite), which
            rewrites the linear layers as well.

    Returns:
        A ``keras.Model`` computing ``model``'s outputs (checked on a generated input), with
        ``rewritten_layers`` and ``rewritten_ops`` naming what takes the rule. On TensorFlow a
        copy of the layers (:func:`saliency_kit.model.rewrite.rewrite`); on JAX, for a ReLU-family
        rule, a model that calls ``model`` with the rule on its traced program
        (:class:`saliency_kit.engine.ruled_model.RuledModel`).

    Raises:
        TypeError: ``model`` is not a ``keras.Model``.
        ValueError: no ReLU-family operation (the message names the activations found), one the
            rule cannot reach, a layer that cannot be copied, or a copy that computes something else.
    """
    return active().rewrite(model, rule)
