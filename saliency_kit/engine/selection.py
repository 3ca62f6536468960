"""What the rows of a kernel's block explain, on every backend: which score columns (or target
objects with their payload) they are scored for, and the held model inputs they carry
(:class:`Selection`, in ``keras.ops``). The backends' contexts differentiate its scores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
from keras import ops

__all__ = ["SMALL_FLOATS", "Selection"]

SMALL_FLOATS = ("float16", "bfloat16")


class Selection:
    """What the rows of a block explain: ``columns`` int32 ``[rows, K]``, the target object that
    scores them and its payload (a pytree of
    tensors, each ``[rows, K, ...]`` or, for per-input leaves, ``[rows, ...]``); with a
    :class:`~saliency_kit.engine.space.Space`, the model inputs each row holds (``held``, each
    ``[rows, ...]``) and where the points go among them."""

    def __init__(
        self,
        columns: Any,
        target: Any,
        payload: Any = None,
        per_input: Any = (),
        held: Any = None,
        space: Any = None,
    ):
        self.columns = columns
        self.target = target
        self.payload = payload
        self._per_input = tuple(per_input)  # per flattened payload leaf: shared by the columns
        self.held = held
        self.space = space

    @property
    def width(self) -> int:
        return int(self.columns.shape[1])

    def _map(self, column_fn: Callable, input_fn: Callable) -> Any:
        if self.payload is None:
            return None
        leaves = keras.tree.flatten(self.payload)
        mapped = [input_fn(leaf) if shared else column_fn(leaf) for leaf, shared in zip(leaves, self._per_input)]
        return keras.tree.pack_sequence_as(self.payload, mapped)

    def _held(self, fn: Callable) -> Any:
        return None if self.held is None else tuple(fn(h) for h in self.held)

    def repeat(self, copies: int) -> Selection:
        """Each row repeated ``copies`` times (row ``b·copies + c`` is copy c of row b)."""
        if copies == 1:
            return self
        rep = lambda t: ops.repeat(t, copies, axis=0)  # noqa: E731
        return Selection(
            rep(self.columns), self.target, self._map(rep, rep), self._per_input, self._held(rep), self.space
        )

    def per_column(self) -> Selection:
        """Rows ``n·K``, one column each: row ``b·K + k`` is column k of row b."""
        n, K = self.columns.shape[0], self.width

        def split(leaf: Any) -> Any:
            return ops.reshape(leaf, [n * K, 1, *leaf.shape[2:]])

        rep = lambda leaf: ops.repeat(leaf, K, axis=0)  # noqa: E731
        return Selection(
            ops.reshape(self.columns, [n * K, 1]),
            self.target,
            self._map(split, rep),
            self._per_input,
            self._held(rep),
            self.space,
        )

    def placed(self, z: Any) -> Any:
        """What the model runs on for points ``z``: ``z`` itself, or, in a space, the held inputs
        with the points placed among them (:meth:`~saliency_kit.engine.space.Space.place`)."""
        return z if self.space is None else self.space.place(z, self.held)

    def values(self, view: Any, z: Any) -> Any:
        """The score vector ``[rows, C]`` at ``z`` whose entries the columns index (class targets,
        a callable's scores); ``ValueError`` for a target without one."""
        return self.target.vector(self.outputs(view, z))

    def _outputs(self, view: Any, z: Any, tap: str | None, shift: Any = None) -> tuple[Any, Any]:
        taps = tuple(self.target.taps)
        if tap is not None and tap not in taps:
            taps += (tap,)
        shifts = None if shift is None else {tap: shift}
        values, taken = view.raw(self.placed(z), taps, strip=self.target.logits, shifts=shifts)
        return self.target.outputs(values, taken), (taken.get(tap) if tap is not None else None)

    @property
    def _target_payload(self) -> Any:
        return self.columns if self.payload is None else self.payload

    def outputs(self, view: Any, z: Any) -> Any:
        """What the rows' scores are read from, at ``z``: the target object's outputs (each leaf
        ``[rows, ...]``; the model's score vector ``[rows, C]`` for class targets)."""
        return self._outputs(view, z, None)[0]

    def score_outputs(self, outputs: Any) -> Any:
        """``[rows, K]`` scores of :meth:`outputs` (of these rows, or any with the same leading axis)."""
        return self.target.score(outputs, self._target_payload)

    def scores(self, view: Any, z: Any, tap: str | None = None, shift: Any = None) -> tuple[Any, Any]:
        """``[rows, K]`` scores at ``z`` (and the tapped activations when ``tap`` is given; ``shift``,
        zeros of their shape, added where the model reads them: see ``ScoreView.raw``)."""
        outputs, activation = self._outputs(view, z, tap, shift)
        return self.score_outputs(outputs), activation

    def probabilities(self, view: Any, z: Any) -> Any:
        """``[rows, K]`` probabilities at ``z`` (Score-CAM): the target object's :meth:`probabilities`
        (for class targets the softmax over the classes taken at the column's class)."""
        return self.target.probabilities(self.outputs(view, z), self._target_payload)
