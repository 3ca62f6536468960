"""What one method kernel is compiled from: :class:`KernelSpec`, which the engine builds and a
backend's ``build_kernel`` compiles (framework-free: the backend's argument specs and the score
views it reads are opaque here)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["KernelSpec"]


@dataclass(frozen=True, eq=False)
class KernelSpec:
    """What one method kernel is compiled from (:meth:`saliency_kit.engine.backend.Backend.build_kernel`).

    Attributes:
        compute: the method's function ``compute(ctx, **options)``.
        options: its constant options (compiled into the kernel).
        array_names: the options that arrive as kernel arguments instead (NumPy arrays: a new
            baseline does not recompile), in argument order; ``array_specs`` their argument specs.
        views: ``views(rule) -> score view`` of the model (the engine's cached look-ups).
        layout: the :class:`~saliency_kit.engine.chunking.Layout` (``n`` rows, ``group`` columns
            per call, the ``budget`` of the method's running sums).
        shape, dtype: one row's shape and dtype.
        vectorise: whether the K backward passes run vectorised rather than in a loop.
        traced: called each time the kernel is traced (the engine's counter).
        reports: filled, while the kernel is traced, with the reports of the op-level backward
            rules it applies (:class:`~saliency_kit.model.override.OverrideReport`).
        doing: what an error inside names (``"gradient on model 'm'"``).
        channel_axis: the channel axis of one row; ``layer_axis`` that of the model's spatial
            layers when it is not the row's (CAM layers), as in :class:`~saliency_kit.engine.job.Job`.
        target: a one-element list holding the target object (``None`` for class columns), read
            when tracing.
        payload: ``(structure, per_input flags, leaf specs)`` of the target's payload, whose
            leaves arrive as the tuple argument ``payload`` (``[n, group, ...]`` per column,
            ``[n, ...]`` per input): new masks or boxes reuse the compiled kernel.
        space: the :class:`~saliency_kit.engine.space.Space` of the rows, as in
            :class:`~saliency_kit.engine.job.Job`: the payload is then ``{"held": model inputs,
            "target": the target's payload}`` and ``x`` the space's rows (its points, or token ids
            the kernel embeds first).
    """

    compute: Callable
    options: dict
    array_names: tuple
    array_specs: list
    views: Callable
    layout: Any
    shape: tuple
    dtype: Any
    vectorise: bool
    traced: Callable[[], None]
    reports: list
    doing: str = "the method"
    channel_axis: int = -1
    layer_axis: int | None = None
    target: list = dataclasses.field(default_factory=lambda: [None])
    payload: tuple = (None, (), ())
    space: Any = None

    @property
    def segments(self) -> tuple | None:
        """``((offset, size), ...)`` of each part in a packed row of the space, else ``None``."""
        return self.space.segments if self.space is not None and self.space.packed else None
