"""What the driver of ``saliency batch --ray`` sends each actor, once: plain data and importable
functions, so that Ray can ship them to any node (:mod:`saliency_kit.batch.ray` runs them).

* :class:`ModelSource`: the model to load (a name or an absolute path) and its weights;
* :class:`Job`: the run's folders, probe, model, methods, targets and looks;
* :func:`targets` and :func:`fixed_targets`: the ``targets_for_model`` functions of a job.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from typing import Any

from ..keras_backend import require_tensorflow
from ..zoo import load_model
from . import run as pipeline

__all__ = ["Job", "ModelSource", "fixed_targets", "targets"]


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What each actor passes to :func:`saliency_kit.load_model` (a name or an absolute path)."""

    model: str
    weights: str | None = None
    unsafe: bool = False

    @classmethod
    def from_args(cls, model: str, weights: str | None = None, unsafe: bool = False) -> ModelSource:
        """Model and weights files as absolute paths, so that actors started elsewhere find them."""

        def absolute(value):
            return os.path.abspath(value) if value is not None and os.path.exists(value) else value

        return cls(absolute(model), absolute(weights), bool(unsafe))

    def load(self) -> tuple[Any, Any]:
        require_tensorflow()
        kwargs: dict[str, Any] = {"unsafe": True} if self.unsafe else {}
        if self.weights is not None:
            kwargs["weights"] = self.weights
        return load_model(self.model, **kwargs)


@dataclasses.dataclass(frozen=True)
class Job:
    """Everything an actor needs, sent once to each actor (plain data and importable functions)."""

    input_dir: str  # absolute
    input_label: str  # INPUT_DIR as given to the driver, for messages (those of the local run)
    out_dir: str  # absolute
    probe: str  # file name of the driver's probe in out_dir
    token: str  # its contents
    model: ModelSource
    methods: tuple  # ((name, options), ...)
    targets_for_model: Callable  # model -> targets_for(inputs) (see pipeline.run)
    looks: dict  # method -> outputs.Look
    batch_size: int
    formats: tuple


def targets(target_spec: Any, batch_size: int) -> Callable:
    """``targets_for_model`` for the command line's parsed ``--target`` values: what
    :func:`saliency_kit.batch.run.targets_for` resolves locally, in a form Ray can send."""
    return functools.partial(_targets_for, target_spec, batch_size)


def _targets_for(target_spec, batch_size: int, model):
    return pipeline.targets_for(target_spec, model, batch_size)


def fixed_targets(value: Any) -> Callable:
    """``targets_for_model`` giving every batch the same ``targets`` argument of ``sk.explain``
    (``"top1"``, a class index, ...), which the engine resolves."""
    return functools.partial(_fixed_targets, value)


def _fixed_targets(value, model):
    return functools.partial(_same, value)


def _same(value, inputs):
    return value
