"""``generated``: the log-probability of each generated token of a causal language model.

For a model whose output is the next-token logits ``z`` ``[B, T, V]`` of its token ids ``x``
``[B, T]`` (KerasHub's ``CausalLM``, or any Keras model of that form), column ``t`` of input
``b`` scores the token at position ``p = start + t``:

    s_bt = log_softmax(z_b[p - 1])[x_b[p]] = log p(x_b[p] | x_b[:p])

All ``T - start`` columns come from one teacher-forced forward pass of the whole sequence (the
engine's K columns share it), so explaining every generated token costs one forward pass and
one backward pass per token, never one forward pass per token.

A token cannot be explained by itself or by what follows it: :meth:`Target.hidden_positions`
marks, for each column, the positions ``≥ p``, and the explanation's attributions and maps are
zero there (``[B, K, T, D]`` and ``[B, K, T]``, the token ids explained in embedding space).

:func:`token_log_probs` is the one score both this kind and ``contrast`` read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Resolved, Target, TargetRequest

__all__ = ["Generated", "generated", "token_log_probs", "sequence_logits", "hidden_after"]


def token_log_probs(logits: Any, positions: Any, tokens: Any) -> Any:
    """``[n, K]``: ``log p(tokens[:, k])`` predicted for position ``positions[:, k]``, read from
    the logits ``[n, T, V]`` at ``positions - 1`` (in ``keras.ops``, float32)."""
    from keras import ops

    log_p = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # [n, T, V]
    before = ops.cast(positions, "int32") - 1  # [n, K]
    rows = ops.take_along_axis(log_p, before[:, :, None], axis=1)  # [n, K, V]
    return ops.take_along_axis(rows, ops.cast(tokens, "int32")[:, :, None], axis=2)[:, :, 0]


def sequence_logits(model: Any, kind: str) -> tuple:
    """``(T, V)`` of ``model``'s one output ``[B, T, V]`` (``None`` where unknown), or a
    ``ValueError`` naming ``kind`` for any other output."""
    from ..model.scores import output_structure

    shape = output_structure(model)
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(
            f"{kind} targets explain a causal language model whose output is next-token logits "
            f"[B, T, V]; model {model.name!r} outputs {shape}."
        )
    return shape[1], shape[2]


def hidden_after(positions: np.ndarray, length: int) -> np.ndarray:
    """bool ``[B, K, length]``: the positions at or after each column's token ``positions`` ``[B, K]``."""
    return np.arange(length)[None, None, :] >= np.asarray(positions)[:, :, None]


class Generated(Target):
    """See :func:`generated`."""

    kind = "generated"
    other_classes = False  # its columns are the sequence's own tokens

    def __init__(self, token_ids: Any, start: int):
        ids = np.asarray(token_ids)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"token_ids must be int token ids [B, T] (or [T] for every input); received "
                f"{ids.dtype} {list(ids.shape)}."
            )
        if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 1 <= start < ids.shape[1]:
            raise ValueError(
                f"start must be the position of the first generated token, in [1, {ids.shape[1] - 1}] "
                f"for token ids of length {ids.shape[1]}; received {start!r}."
            )
        self.token_ids = ids
        self.start = int(start)

    def __repr__(self) -> str:
        return f"generated(int{list(self.token_ids.shape)}, start={self.start})"

    def kernel_key(self) -> tuple:
        return (Generated,)  # positions and tokens are the payload: new text never recompiles

    def resolve(self, request: TargetRequest) -> Resolved:
        B = request.num_inputs
        length, vocabulary = sequence_logits(request.model, "generated")
        ids = self.token_ids
        if len(ids) == 1 and B > 1:
            ids = np.repeat(ids, B, axis=0)
        if len(ids) != B:
            raise ValueError(f"generated() needs token ids for each of the {B} inputs; received {len(ids)} rows.")
        if length is not None and ids.shape[1] != length:
            raise ValueError(
                f"generated() token ids hold {ids.shape[1]} positions but the model's logits hold "
                f"{length}: give the token ids the model is fed."
            )
        if vocabulary is not None and (ids.min() < 0 or ids.max() >= vocabulary):
            raise ValueError(f"generated() token ids must lie in [0, {vocabulary - 1}]; received {ids.max()}.")
        positions = np.tile(np.arange(self.start, ids.shape[1], dtype=np.int64), (B, 1))  # [B, K]
        tokens = ids[:, self.start :].astype(np.int64)
        info = [
            [{"kind": "generated", "position": int(p), "token": int(t)} for p, t in zip(prow, trow)]
            for prow, trow in zip(positions, tokens)
        ]
        return Resolved(tokens, {"position": positions, "token": tokens}, info, Generated(ids[:1], self.start))

    def score(self, outputs: Any, payload: Any) -> Any:
        return token_log_probs(outputs, payload["position"], payload["token"])

    def probabilities(self, outputs: Any, payload: Any) -> Any:
        from keras import ops

        return ops.exp(self.score(outputs, payload))

    def hidden_positions(self, payload: Any, length: int) -> np.ndarray:
        return hidden_after(payload["position"], length)

    def class_count(self, model: Any) -> int | None:
        """The vocabulary: the columns index tokens."""
        return sequence_logits(model, "generated")[1]


def generated(token_ids: Any, *, start: int) -> Generated:
    """Every token from ``start`` on of a causal language model's sequence, one column each.

    Args:
        token_ids: int ``[B, T]`` (or ``[T]``, the same for every input): the sequence the model
            is fed, prompt and generated tokens (teacher forcing).
        start: the position of the first generated token (the prompt's length), ``≥ 1``.

    Column ``t`` scores ``log p(token_ids[:, start + t] | token_ids[:, :start + t])``
    (``log_softmax`` of the logits at ``start + t - 1``); ``K = T - start``. Attributions at or
    after each column's own token are zero. ``Explanation.targets`` holds the tokens and
    ``Explanation.target_info[b][k]`` ``{"kind": "generated", "position", "token"}``.
    """
    return Generated(token_ids, start)
