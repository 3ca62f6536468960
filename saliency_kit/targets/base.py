"""The target protocol: what a column of an explanation explains, and its per-input payload.

A target object is resolved once on the host, before any gradient, to a :class:`Resolved`:

* ``columns`` int ``[B, K]``: one number per input and column (a class, a unit's index, ...);
* ``payload``: a pytree (``tf.nest`` structure) of NumPy arrays, each ``[B, K, ...]`` (one value
  per input and column: a mask per class, a box) or, wrapped in :class:`PerInput`, ``[B, ...]``
  (one value per input, shared by its columns: a given mask). ``None`` means "the columns";
* ``info``: ``B`` lists of ``K`` dicts saying what each column explains (``kind`` first);
* ``target``: the object that scores (the request's own, or a copy bound to the model).

The engine slices every payload array with the inputs (axis 0, padded like the inputs) and the
columns (axis 1, in groups like the classes) and hands the slices to the compiled kernel as tensor
arguments of a fixed signature: new masks or boxes do not recompile. Inside the kernel the
model's raw outputs reach :meth:`Target.score`, which returns the ``[n, K]`` scores the method
explains. Noisy, blurred or occluded copies of an input keep its payload.

This module imports neither TensorFlow nor Keras; the scores do, when they run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Target",
    "PerInput",
    "Resolved",
    "TargetRequest",
    "Classes",
    "Several",
    "as_target",
    "is_target",
    "class_info",
]


class PerInput:
    """A payload leaf with one value per input, shared by all its columns: ``array [B, ...]``."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = np.asarray(array)

    def __repr__(self) -> str:
        return f"PerInput(shape={self.array.shape}, dtype={self.array.dtype})"


@dataclass
class Resolved:
    """A target resolved for ``B`` inputs: see the module docstring."""

    columns: np.ndarray
    payload: Any = None
    info: list = field(default_factory=list)
    target: Target | None = None

    @property
    def shape(self) -> tuple:
        return tuple(self.columns.shape)

    def take(self, rows: Any) -> Resolved:
        """The rows ``rows`` (int ``[M]``, repeats allowed) of every per-input array: the target of
        ``M`` inputs that are copies of these (perturbed images scored with their own payload)."""
        import tensorflow as tf

        rows = np.asarray(rows, np.int64)
        payload = (
            None
            if self.payload is None
            else tf.nest.map_structure(
                lambda leaf: PerInput(leaf.array[rows]) if isinstance(leaf, PerInput) else np.asarray(leaf)[rows],
                self.payload,
            )
        )
        info = [self.info[r] for r in rows] if self.info else []
        return Resolved(self.columns[rows], payload, info, self.target)


@dataclass
class TargetRequest:
    """What :meth:`Target.resolve` sees: the checked inputs ``[B, ...]`` and the model.

    ``clean_outputs()`` gives the model's raw outputs at the clean inputs (the score view's
    values: logits behind a final softmax of a single-output model), NumPy with leading axis
    ``B``, computed once by one batched forward pass and shared by every target of the request.
    """

    model: Any
    inputs: np.ndarray
    score: str = "logits"
    batch_size: int = 32
    class_names: Sequence[str] | None = None
    forward: Callable | None = None
    _memo: dict = field(default_factory=dict, repr=False)

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def clean_outputs(self, strip: bool = True) -> Any:
        """``strip=False``: the outputs as the model gives them, a final softmax/sigmoid kept."""
        if strip not in self._memo:
            if self.forward is None:
                raise ValueError(
                    "this request cannot run the model: give TargetRequest a forward(strip) function (explain "
                    "and resolve_targets do); received forward=None."
                )
            self._memo[strip] = self.forward(strip)
        return self._memo[strip]


class Target:
    """Base class of target objects (subclass it for a kind of your own).

    A subclass implements :meth:`resolve` (host side, NumPy: the columns, the payload and what
    each column explains) and :meth:`score` (inside the compiled kernel, TensorFlow or
    ``keras.ops``: ``[n, K]`` scores from the model's outputs and the payload sliced to the same
    ``n`` rows). Example, a weighted sum of a regression model's outputs, one weight vector per
    input::

        class Weighted(sk.targets.Target):
            kind = "weighted"

            def __init__(self, weights):            # [B, D]
                self.weights = np.asarray(weights, np.float32)

            def resolve(self, request):
                B = request.num_inputs
                payload = sk.targets.PerInput(self.weights)
                return sk.targets.Resolved(np.zeros((B, 1), np.int64), payload,
                                           [[{"kind": "weighted"}] for _ in range(B)], self)

            def score(self, outputs, payload):       # [n, D], [n, D] -> [n, 1]
                return tf.reduce_sum(outputs * payload, axis=1, keepdims=True)

    Attributes:
        kind: a short name recorded in ``Explanation.target_info``.
        taps: paths of inner layers whose outputs :meth:`outputs` needs (``unit`` targets).
        logits: whether ``score="logits"`` removes a single output's final softmax/sigmoid before
            :meth:`score` reads it (a detector's boxes must be read as the model gives them).
    """

    kind: str = "target"
    taps: tuple = ()
    logits: bool = True

    def resolve(self, request: TargetRequest) -> Resolved:
        """``Resolved(columns int [B, K], payload, info, target)`` for ``request``'s inputs."""
        raise NotImplementedError(f"{type(self).__name__} must implement resolve(request) -> Resolved")

    def outputs(self, values: Any, taps: dict) -> Any:
        """What :meth:`score` reads: the model's ``values`` (its output structure) by default;
        ``taps`` maps each path of :attr:`taps` to that layer's activations."""
        return values

    def score(self, outputs: Any, payload: Any) -> Any:
        """``[n, K]`` scores: ``outputs`` from :meth:`outputs` for ``n`` rows, ``payload`` the
        resolved payload's slice for the same rows (the columns int ``[n, K]`` when it is None)."""
        raise NotImplementedError(f"{type(self).__name__} must implement score(outputs, payload) -> [n, K]")

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        """``[n, K]`` in [0, 1] where the kind has a natural probability (Score-CAM's channel
        weights); by default the scores themselves."""
        return self.score(outputs, payload)

    def kernel_key(self) -> tuple:
        """What the compiled score depends on besides the payload (a hashable value): by default
        the class and the attributes that are not arrays. New payloads never recompile."""
        from ..engine.cache import value_key

        items = tuple(sorted((k, value_key(v)) for k, v in vars(self).items() if not _is_data(v)))
        return (type(self), items)


def _is_data(value: Any) -> bool:
    if isinstance(value, (np.ndarray, PerInput)):
        return True
    if isinstance(value, (list, tuple)) and value and not isinstance(value[0], (str, int)):
        return True
    return False


def is_target(value: Any) -> bool:
    """Whether ``value`` is a target object or a non-empty list of them."""
    if isinstance(value, Target):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, Target) for v in value)


def as_target(value: Any) -> Target:
    """A target object, or a list of them as one :class:`Several`."""
    if isinstance(value, Target):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Target) for v in value):
        return value[0] if len(value) == 1 else Several(tuple(value))
    raise TypeError(f"expected a sk.targets target object or a list of them; received {value!r}.")


def class_info(columns: np.ndarray, names: Sequence[str] | None = None, kind: str = "class") -> list:
    """``B`` lists of ``K`` dicts ``{"kind", "class"[, "name"]}`` for int ``columns [B, K]``."""

    def one(c: Any) -> dict:
        entry = {"kind": kind, "class": int(c)}
        if names and 0 <= c < len(names):
            entry["name"] = names[c]
        return entry

    return [[one(c) for c in row] for row in np.asarray(columns)]


class Classes(Target):
    """The class targets of a ``[B, C]`` output (an int, names, ``"topK"``, an array ``[B, K]``):
    the score of column k is ``outputs[:, classes[:, k]]``, a gather. ``sk.explain`` runs these
    through the engine's own fast path; this object lets them sit in a list with other kinds."""

    kind = "class"

    def __init__(self, classes: Any = "top1"):
        self.classes = classes

    def resolve(self, request: TargetRequest) -> Resolved:
        from ..model.scores import score_columns
        from .parse import parse, resolve

        count = score_columns(request.model)
        if count is None:
            from .errors import class_target_error

            raise class_target_error(request.model, self.classes)
        spec = parse(self.classes, request.num_inputs, count, request.class_names)
        values = request.clean_outputs() if spec.needs_scores else None
        columns = resolve(spec, values, request.num_inputs, count)
        return Resolved(columns, None, class_info(columns, request.class_names), self)

    def score(self, outputs: Any, payload: Any) -> Any:
        import tensorflow as tf

        return tf.gather(outputs, tf.cast(payload, tf.int32), batch_dims=1)

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        import tensorflow as tf

        return self.score(tf.nn.softmax(tf.cast(outputs, tf.float32), axis=-1), payload)


class Several(Target):
    """A list of target objects side by side: their columns concatenated, in order.

    Each part's payload is laid out over all ``K`` columns (a column of another part repeats the
    part's first column, so every part scores valid values) and an ``owner`` column index says
    which part scores each column: one forward pass serves every part.
    """

    kind = "several"

    def __init__(self, parts: tuple):
        self.parts = tuple(parts)
        self.logits = all(part.logits for part in self.parts)
        self.taps = tuple(dict.fromkeys(path for part in self.parts for path in part.taps))

    def kernel_key(self) -> tuple:
        return (type(self), tuple(part.kernel_key() for part in self.parts))

    def resolve(self, request: TargetRequest) -> Resolved:
        done = [part.resolve(request) for part in self.parts]
        B = request.num_inputs
        widths = [r.columns.shape[1] for r in done]
        K = sum(widths)
        columns = np.concatenate([r.columns for r in done], axis=1)
        owner = np.repeat(np.arange(len(done)), widths)
        payloads, start = [], 0
        for r, width in zip(done, widths):
            index = np.clip(np.arange(K) - start, 0, width - 1)
            payload = r.columns if r.payload is None else r.payload
            payloads.append(_spread(payload, index))
            start += width
        info: list[list] = [sum((r.info[b] for r in done), []) for b in range(B)]
        bound = Several(tuple(r.target for r in done))
        return Resolved(columns, {"owner": np.tile(owner, (B, 1)), "parts": tuple(payloads)}, info, bound)

    def outputs(self, values: Any, taps: dict) -> tuple[Any, dict]:
        return values, taps

    def _each(self, outputs: Any, payload: Any, name: str) -> Any:
        import tensorflow as tf

        values, taps = outputs
        scores = [
            tf.cast(getattr(part, name)(part.outputs(values, taps), piece), tf.float32)
            for part, piece in zip(self.parts, payload["parts"])
        ]
        stacked = tf.stack(scores, axis=-1)  # [n, K, parts]
        return tf.gather(stacked, tf.cast(payload["owner"], tf.int32), axis=2, batch_dims=2)

    def score(self, outputs: Any, payload: Any) -> Any:
        return self._each(outputs, payload, "score")

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        return self._each(outputs, payload, "probabilities")


def _spread(payload: Any, index: np.ndarray) -> Any:
    """Every per-column leaf ``[B, k, ...]`` of ``payload`` taken at columns ``index`` ``[K]``."""
    import tensorflow as tf

    return tf.nest.map_structure(
        lambda leaf: leaf if isinstance(leaf, PerInput) else np.asarray(leaf)[:, index], payload
    )
