"""The target protocol: what a column of an explanation explains, and its per-input payload.

Every form of ``targets`` becomes one target object at the API's edge (:func:`saliency_kit.targets.as_target`:
class targets a :class:`~saliency_kit.targets.classes.Classes`, a callable a
:class:`~saliency_kit.targets.classes.Function`). A target object is resolved once on the host, before
any gradient, to a :class:`Resolved`:

* ``columns`` int ``[B, K]``: one number per input and column (a class, a unit's index, ...);
* ``payload``: a pytree (a ``keras.tree`` structure) of NumPy arrays, each ``[B, K, ...]`` (one value
  per input and column: a mask per class, a box) or, wrapped in :class:`PerInput`, ``[B, ...]``
  (one value per input, shared by its columns: a given mask). ``None`` means "the columns";
* ``info``: ``B`` lists of ``K`` dicts saying what each column explains (``kind`` first);
* ``target``: the object that scores (the request's own, or a copy bound to the model);
* ``vectors``: the score vectors ``[B, C]`` at the clean inputs, when resolving computed them
  (``"topK"`` class targets were ranked by them).

The engine slices every payload array with the inputs (axis 0, padded like the inputs) and the
columns (axis 1, in groups like the classes) and hands the slices to the compiled kernel as tensor
arguments of a fixed signature: new masks or boxes do not recompile. Inside the kernel the
model's raw outputs reach :meth:`Target.score`, which returns the ``[n, K]`` scores the method
explains. Noisy, blurred or occluded copies of an input keep its payload.

A kind also says what evaluation needs of it: :meth:`Target.class_count` (how many classes its
columns index, for the metrics that read other classes) and :meth:`Target.object_masks` (the
pixels of its object, for the localisation metrics). This module imports neither TensorFlow nor
Keras; the scores do (in ``keras.ops``), when they run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.cache import value_key
from ..engine.payload import PerInput

__all__ = [
    "Target",
    "PerInput",
    "Resolved",
    "TargetRequest",
    "Several",
    "is_target",
    "class_info",
    "map_leaves",
]


@dataclass
class Resolved:
    """A target resolved for ``B`` inputs: see the module docstring."""

    columns: np.ndarray
    payload: Any = None
    info: list = field(default_factory=list)
    target: Any = None  # the bound Target; every resolve gives one
    vectors: np.ndarray | None = None

    @property
    def shape(self) -> tuple:
        return tuple(self.columns.shape)

    def take(self, rows: Any) -> Resolved:
        """The rows ``rows`` (int ``[M]``, repeats allowed) of every per-input array: the target of
        ``M`` inputs that are copies of these (perturbed images scored with their own payload)."""
        rows = np.asarray(rows, np.int64)
        payload = map_leaves(
            self.payload, lambda leaf: leaf.take(rows) if isinstance(leaf, PerInput) else np.asarray(leaf)[rows]
        )
        info = [self.info[r] for r in rows] if self.info else []
        vectors = None if self.vectors is None else self.vectors[rows]
        return Resolved(self.columns[rows], payload, info, self.target, vectors)


def map_leaves(payload: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to every leaf of a payload pytree (a :class:`PerInput` is one leaf); ``None`` stays."""
    if payload is None:
        return None
    from keras import tree

    return tree.map_structure(fn, payload)


@dataclass
class TargetRequest:
    """What :meth:`Target.resolve` sees: the checked inputs ``[B, ...]`` and the model.

    ``clean_outputs()`` gives the model's raw outputs at the clean inputs (the score view's
    values: logits behind a final softmax of a single-output model), NumPy with leading axis
    ``B``, computed once by one batched forward pass and shared by every target of the request.
    ``method``: the declaration (:class:`saliency_kit.methods.Method`) of the method the targets
    are resolved for, or ``None`` (targets resolved on their own); a kind whose default score
    suits some methods better than others reads it (a box target's default score).
    """

    model: Any
    inputs: np.ndarray
    score: str = "logits"
    batch_size: int = 32
    class_names: Sequence[str] | None = None
    forward: Callable | None = None
    method: Any = None
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

    The smallest subclass implements :meth:`score` alone (in ``keras.ops``: ``[n, K]`` scores from
    the model's outputs and the payload rows of the same ``n`` inputs) and is built as
    ``MyTarget(payload=array [B, ...])`` or with no payload; the default :meth:`resolve` gives one
    column per input. Example, a weighted sum of a regression model's outputs, one weight vector
    per input::

        class Weighted(sk.targets.Target):
            kind = "weighted"

            def score(self, outputs, payload):       # [n, D], [n, D] -> [n, 1]
                return keras.ops.sum(outputs * payload, axis=1, keepdims=True)

        sk.explain(model, x, targets=Weighted(payload=weights))       # weights [B, D]

    :meth:`resolve` is overridden only for several columns or host-side work (NumPy: the
    columns, the payload and what each column explains).

    Attributes:
        kind: a short name recorded in ``Explanation.target_info``.
        taps: paths of inner layers whose outputs :meth:`outputs` needs (``unit`` targets).
        logits: whether ``score="logits"`` removes a single output's final softmax/sigmoid before
            :meth:`score` reads it (a detector's boxes must be read as the model gives them).
        score_vector: whether the columns index the model's own score vector ``[B, C]`` (class
            targets): scores may then be read from a forward pass of the model alone.
        other_classes: whether the target may be explained again at other classes of its columns
            (``random_logit`` does): not for a score function, whose columns are its outputs.
        payload: the per-input array ``[B, ...]`` given as ``payload=`` (or ``None``).
    """

    kind: str = "target"
    taps: tuple = ()
    logits: bool = True
    score_vector: bool = False
    other_classes: bool = True

    def __init__(self, payload: Any = None):
        self.payload = None if payload is None else np.asarray(payload)

    def resolve(self, request: TargetRequest) -> Resolved:
        """``Resolved(columns int [B, K], payload, info, target)`` for ``request``'s inputs. By
        default one column per input (its index 0), the ``payload=`` rows handed to :meth:`score`
        per input, and ``{"kind": kind}`` as what each column explains."""
        B = request.num_inputs
        given = getattr(self, "payload", None)
        payload = None
        if given is not None:
            if len(given) != B:
                raise ValueError(
                    f"a {self.kind!r} target's payload must hold one row per input ({B}); received shape {given.shape}."
                )
            payload = PerInput(given)
        info = [[{"kind": self.kind}] for _ in range(B)]
        return Resolved(np.zeros((B, 1), np.int64), payload, info, self)

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

    def vector(self, outputs: Any) -> Any:
        """The score vector ``[n, C]`` whose entries the columns index (``ctx.values``), for the
        kinds that have one (class targets, a callable's scores); ``ValueError`` otherwise."""
        raise ValueError(
            "ctx.values gives the score vector of class targets; with a target object use ctx.scores or "
            f"ctx.probabilities; received {self!r}."
        )

    def class_count(self, model: Any) -> int | None:
        """How many classes the columns index (a metric reading other classes of each target, such as
        ``random_logit``, draws among them); ``None`` for a kind without classes."""
        return None

    def object_masks(self, count: int, shape: tuple | None) -> np.ndarray | None:
        """The pixels of each column's object for the localisation metrics, bool ``[count, H, W]`` or
        ``[count, K, H, W]`` (``shape`` the maps' ``(H, W)``); ``None`` when the kind has none."""
        return None

    def hidden_positions(self, payload: Any, length: int) -> np.ndarray | None:
        """bool ``[B, K, length]``: the sequence positions each column must not be explained by
        (a generated token's own and later ones), zeroed in the attributions and maps whose axis
        2 has ``length`` positions; ``payload`` the resolved payload (NumPy). ``None``: none."""
        return None

    def kernel_key(self) -> tuple:
        """What the compiled score depends on besides the payload (a hashable value): by default
        the class and the attributes that are not arrays. New payloads never recompile."""
        items = tuple(sorted((k, value_key(v)) for k, v in vars(self).items() if not _is_data(v)))
        return (type(self), items)


def _is_data(value: Any) -> bool:
    if value is None:
        return False
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


def class_info(columns: np.ndarray, names: Sequence[str] | None = None, kind: str = "class") -> list:
    """``B`` lists of ``K`` dicts ``{"kind", "class"[, "name"]}`` for int ``columns [B, K]``."""

    def one(c: Any) -> dict:
        entry = {"kind": kind, "class": int(c)}
        if names and 0 <= c < len(names):
            entry["name"] = names[c]
        return entry

    return [[one(c) for c in row] for row in np.asarray(columns)]


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
        from keras import ops

        values, taps = outputs
        scores = [
            ops.cast(getattr(part, name)(part.outputs(values, taps), piece), "float32")
            for part, piece in zip(self.parts, payload["parts"])
        ]
        stacked = ops.stack(scores, axis=-1)  # [n, K, parts]
        owner = ops.cast(payload["owner"], "int32")[..., None]  # [n, K, 1]
        return ops.take_along_axis(stacked, owner, axis=2)[..., 0]

    def score(self, outputs: Any, payload: Any) -> Any:
        return self._each(outputs, payload, "score")

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        return self._each(outputs, payload, "probabilities")

    def hidden_positions(self, payload: Any, length: int) -> np.ndarray | None:
        hidden = [part.hidden_positions(piece, length) for part, piece in zip(self.parts, payload["parts"])]
        if all(h is None for h in hidden):
            return None
        owner = np.asarray(payload["owner"])  # [B, K]
        shape = (*owner.shape, length)
        stacked = np.stack([np.zeros(shape, bool) if h is None else np.broadcast_to(h, shape) for h in hidden])
        return np.take_along_axis(stacked, owner[None, :, :, None], axis=0)[0]


def _spread(payload: Any, index: np.ndarray) -> Any:
    """Every per-column leaf ``[B, k, ...]`` of ``payload`` taken at columns ``index`` ``[K]``."""
    return map_leaves(payload, lambda leaf: leaf if isinstance(leaf, PerInput) else np.asarray(leaf)[:, index])
