"""What the driver of ``saliency batch --ray`` sends each actor, once: plain data, so that Ray
can ship it to any node (:mod:`saliency_kit.batch.ray` runs them).

* :class:`ModelSource`: the model to load (a name or an absolute path) and its weights;
* :class:`Job`: the run's folders, probe, model, methods, task plan and looks.

Each actor finds its images' targets from the job's task plan as the local run does
(:class:`saliency_kit.batch.run.TaskAsker`), so every task runs on Ray.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..keras_backend import require_tensorflow
from ..targets.tasks import TaskPlan
from ..zoo import load_model

__all__ = ["Job", "ModelSource"]


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
    """Everything an actor needs, sent once to each actor (plain data)."""

    input_dir: str  # absolute
    input_label: str  # INPUT_DIR as given to the driver, for messages (those of the local run)
    out_dir: str  # absolute
    probe: str  # file name of the driver's probe in out_dir
    token: str  # its contents
    model: ModelSource
    methods: tuple  # ((name, options), ...)
    task: TaskPlan  # what each image asks (see pipeline.TaskAsker)
    looks: dict  # method -> outputs.Look
    batch_size: int
    formats: tuple
