"""``contrast``: why a causal language model wrote one token rather than another.

For a model whose output is the next-token logits ``z`` ``[B, T, V]`` of its token ids ``x``, the
one column of input ``b`` scores, at ``position`` ``p``,

    s_b = log p(token | x_b[:p]) − log p(foil | x_b[:p]) = z_b[p − 1][token] − z_b[p − 1][foil]

(the log-probabilities of :func:`~saliency_kit.targets.generated.token_log_probs`; their
difference is the difference of the logits). ``p`` may be ``T``: the token that would follow the
sequence. Attributions at or after ``p`` are zero, as for ``generated``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .base import Resolved, Target, TargetRequest
from .generated import hidden_after, sequence_logits, token_log_probs

__all__ = ["Contrast", "contrast"]


def _per_input(value: Any, name: str, B: int) -> np.ndarray:
    """int ``[B]``: ``value`` (an int, or one int per input)."""
    array = np.asarray(value)
    if array.dtype == bool or not np.issubdtype(array.dtype, np.integer) or array.ndim > 1:
        raise ValueError(f"contrast() {name} must be an int or one int per input; received {value!r}.")
    if array.ndim == 0:
        return np.full(B, int(array), np.int64)
    if len(array) != B:
        raise ValueError(f"contrast() {name} must give one int per input ({B}); received {len(array)}.")
    return array.astype(np.int64)


class Contrast(Target):
    """See :func:`contrast`."""

    kind = "contrast"
    other_classes = False

    def __init__(self, position: Any, token: Any, foil: Any):
        for name, value in (("position", position), ("token", token), ("foil", foil)):
            if isinstance(value, (bool, float)) or not (isinstance(value, numbers.Integral) or np.ndim(value) == 1):
                raise ValueError(f"contrast() {name} must be an int or one int per input; received {value!r}.")
        self.position, self.token, self.foil = position, token, foil

    def __repr__(self) -> str:
        return f"contrast({self.position!r}, {self.token!r}, {self.foil!r})"

    def kernel_key(self) -> tuple:
        return (Contrast,)

    def resolve(self, request: TargetRequest) -> Resolved:
        B = request.num_inputs
        length, vocabulary = sequence_logits(request.model, "contrast")
        position = _per_input(self.position, "position", B)
        token, foil = _per_input(self.token, "token", B), _per_input(self.foil, "foil", B)
        if length is not None and (position.min() < 1 or position.max() > length):
            raise ValueError(
                f"contrast() position must lie in [1, {length}] (the token the logits at position - 1 "
                f"predict); received {self.position!r}."
            )
        if vocabulary is not None:
            for name, ids in (("token", token), ("foil", foil)):
                if ids.min() < 0 or ids.max() >= vocabulary:
                    raise ValueError(f"contrast() {name} must lie in [0, {vocabulary - 1}]; received {ids.tolist()}.")
        info = [
            [{"kind": "contrast", "position": int(p), "token": int(t), "foil": int(f)}]
            for p, t, f in zip(position, token, foil)
        ]
        payload = {"position": position[:, None], "token": token[:, None], "foil": foil[:, None]}
        return Resolved(token[:, None], payload, info, Contrast(0, 0, 0))

    def score(self, outputs: Any, payload: Any) -> Any:
        position = payload["position"]
        return token_log_probs(outputs, position, payload["token"]) - token_log_probs(
            outputs, position, payload["foil"]
        )

    def hidden_positions(self, payload: Any, length: int) -> np.ndarray:
        return hidden_after(payload["position"], length)


def contrast(position: Any, token: Any, foil: Any) -> Contrast:
    """``log p(token) − log p(foil)`` at ``position`` of a causal language model's sequence.

    Args:
        position: the position of the token explained (an int, or one per input), in
            ``[1, T]``: the logits at ``position − 1`` predict it; ``T`` is the token after the
            sequence.
        token, foil: the token written and the token it is compared with (ints, or one per input).

    One column (``K = 1``); attributions at or after ``position`` are zero.
    ``Explanation.target_info[b][0]``: ``{"kind": "contrast", "position", "token", "foil"}``.
    """
    return Contrast(position, token, foil)
