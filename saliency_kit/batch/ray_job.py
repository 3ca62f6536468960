"""The plain data of ``saliency batch --ray`` (:mod:`saliency_kit.batch.ray` uses it): what the
driver sends each actor once, so that Ray can ship it to any node, and the cluster settings.

* :class:`ModelSource`: the model to load (a name or an absolute path) and its weights;
* :class:`Job`: the run's folders, probe, model and recipe (:class:`saliency_kit.batch.run.Recipe`:
  task plan, methods, looks, batch size, formats);
* :class:`Cluster`: where the driver runs the actors, and how many (it stays with the driver).

Each actor finds its images' targets from the recipe's task plan as the local run does
(:class:`saliency_kit.batch.run.TaskAsker`), so every task runs on Ray.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ..keras_backend import require_supported_backend
from ..zoo import load_model
from .run import Recipe

__all__ = ["Cluster", "Job", "ModelSource"]


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
        require_supported_backend()
        kwargs: dict[str, Any] = {"unsafe": True} if self.unsafe else {}
        if self.weights is not None:
            kwargs["weights"] = self.weights
        return load_model(self.model, **kwargs)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where a Ray run computes and with how many actors.

    ``address``: the cluster to join (``auto``, ``ray://HOST:PORT``, ``HOST:PORT``; ``None``
    starts a local Ray instance of ``num_cpus`` CPUs, default all). ``workers``: actors (default:
    one per CPU of the cluster, or per ``gpus_per_worker`` GPUs); each takes one CPU and
    ``gpus_per_worker`` GPUs from Ray's scheduler. ``batch_images``: images per actor call
    (default: the recipe's ``batch_size``, the local run's batches exactly)."""

    address: str | None = None
    workers: int | None = None
    gpus_per_worker: float = 0
    batch_images: int | None = None
    num_cpus: int | None = None


@dataclasses.dataclass(frozen=True)
class Job:
    """Everything an actor needs, sent once to each actor (plain data)."""

    input_dir: str  # absolute
    input_label: str  # INPUT_DIR as given to the driver, for messages (those of the local run)
    out_dir: str  # absolute
    probe: str  # file name of the driver's probe in out_dir
    token: str  # its contents
    model: ModelSource
    recipe: Recipe  # the task plan, methods, looks, batch size and formats of the run
    backend: str  # the driver's Keras backend ("tensorflow", "jax", "torch"): every actor must run it
    max_pixels: int | None = None  # larger images are refused (None: Pillow's limit)
