"""The one job the engine runs: a model, the points explained, the resolved target, the method's
prepared options and how the rows are laid out.

A :class:`Job` is frozen: it is built once by the explain pipeline's prepare step (``sk.explain``,
``sk.jacobian``, the callback, batch and every metric build theirs the same way) and handed to
:func:`saliency_kit.engine.run` whole. Deriving another job (a metric's perturbed copies, the
clean scores' forward pass) is :meth:`Job.with_`, never an edit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Job"]


@dataclass(frozen=True, eq=False)
class Job:
    """What the engine runs (arrays NumPy).

    Attributes:
        model: the Keras model.
        rows: the points ``[B, ...]``: the model's one input, or the rows of :attr:`space` (its
            points, or the token ids its kernel embeds).
        selection: the resolved target (:class:`saliency_kit.targets.Resolved`): its columns int
            ``[B, K]``, bound target object, payload and, when resolving computed them, the clean
            score vectors.
        options: the method's prepared options (NumPy arrays become kernel arguments).
        score: ``"logits"`` or ``"output"``.
        batch_size: the most model evaluations per compiled call.
        keys: int ``[B]`` noise keys (default each row's position).
        channel_axis: the channel axis of one row; ``layer_axis`` that of the model's spatial
            layers when it is not the input's (CAM layers).
        space: the :class:`~saliency_kit.engine.space.Space` of the rows when they are not one
            model input; ``held`` every model input ``[B, ...]`` (graph order) they carry.
        cost: model evaluations per row and target (sizes the chunks).
    """

    model: Any
    rows: np.ndarray
    selection: Any
    options: dict = field(default_factory=dict)
    score: str = "logits"
    batch_size: int = 32
    keys: np.ndarray | None = None
    channel_axis: int = -1
    layer_axis: int | None = None
    space: Any = None
    held: Any = None
    cost: int = 1

    def with_(self, **changes: Any) -> Job:
        """This job with some fields replaced."""
        return dataclasses.replace(self, **changes)
