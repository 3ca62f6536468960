"""``explain_generation``: which prompt tokens made a causal language model write its text.

A prompt (a string, tokenised by the model's own preprocessor, or token ids) is continued
greedily, one token at a time, each the arg-max of the logits at the last position; the whole
sequence ``[1, T]`` is then explained with :func:`saliency_kit.targets.generated`: each
generated token a column of one teacher-forced forward pass, its attributions over the token
embeddings ``[1, K, T, D]`` and maps ``[1, K, T]``, zero at and after its own position. The
result carries the sequence's token strings (``Explanation.tokens``) and where generation
started (``options["start"]``); its text is :func:`generated_text`.

A model is fed as it declares its inputs: KerasHub's ``CausalLM`` a dict ``{"token_ids",
"padding_mask"}``, any other Keras model of that form its token ids ``[B, T]``.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from ..explanation import Explanation
from ..targets.generated import generated
from .api import explain

__all__ = ["explain_generation", "greedy", "prompt_ids", "model_inputs", "token_strings", "generated_text"]


def _tokenizer(model: Any) -> Any:
    return getattr(getattr(model, "preprocessor", None), "tokenizer", None)


def prompt_ids(model: Any, prompt: Any) -> np.ndarray:
    """int ``[P]``: ``prompt`` as the model's preprocessor tokenises it (its start token
    included), or given token ids ``[P]`` / ``[1, P]`` as they are."""
    if isinstance(prompt, str):
        preprocessor = getattr(model, "preprocessor", None)
        if preprocessor is None or not hasattr(preprocessor, "generate_preprocess"):
            raise ValueError(
                f"a text prompt needs a model with a preprocessor that tokenises it (KerasHub's CausalLM); "
                f"model {model.name!r} has none: give the prompt as token ids."
            )
        packed = preprocessor.generate_preprocess([prompt])
        ids = np.asarray(packed["token_ids"])[0]
        return ids[np.asarray(packed["padding_mask"])[0].astype(bool)].astype(np.int32)
    ids = np.asarray(prompt)
    if ids.ndim == 2 and len(ids) == 1:
        ids = ids[0]
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or ids.size == 0:
        raise ValueError(
            f"prompt must be a string or int token ids [P] (or [1, P]); received {ids.dtype} {list(ids.shape)}."
        )
    return ids.astype(np.int32)


def model_inputs(model: Any, ids: np.ndarray) -> Any:
    """What ``model`` is fed for token ids ``[B, T]``: the ids, or KerasHub's dict with a padding mask."""
    names = [getattr(t, "name", "") for t in getattr(model, "inputs", None) or []]
    if "token_ids" in names:
        inputs = {"token_ids": ids}
        if "padding_mask" in names:
            inputs["padding_mask"] = np.ones_like(ids)
        return inputs
    return ids


def greedy(model: Any, ids: Any, max_new_tokens: int, stop: int | None = None) -> np.ndarray:
    """int ``[P + N]``: the token ids ``[P]`` continued by ``N ≤ max_new_tokens`` tokens, each the
    arg-max of the logits ``[1, T, V]`` at the last position of the sequence so far; generation
    ends before a ``stop`` token (not included)."""
    sequence = np.asarray(ids, np.int32)
    for _ in range(max_new_tokens):
        logits = keras.ops.convert_to_numpy(model(model_inputs(model, sequence[None]), training=False))
        token = int(np.argmax(logits[0, -1]))
        if stop is not None and token == stop:
            break
        sequence = np.append(sequence, np.int32(token))
    return sequence


def token_strings(model: Any, ids: Any) -> list[str]:
    """Each token id's text as the model's tokenizer writes it alone (``" world"``, a leading space
    marking a word's start), else its vocabulary entry, else its id."""
    tokenizer = _tokenizer(model)
    strings = []
    for i in np.asarray(ids).tolist():
        text = None
        if tokenizer is not None:
            try:
                text = tokenizer.detokenize(np.array([i], np.int32))
                text = text.numpy() if hasattr(text, "numpy") else text
                text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
            except Exception:  # a tokenizer that cannot write one token alone
                text = None
            if not text and hasattr(tokenizer, "id_to_token"):
                text = str(tokenizer.id_to_token(i))
        strings.append(text if text else str(i))
    return strings


def generated_text(explanation: Explanation) -> str:
    """The text an :func:`explain_generation` explanation generated (its tokens from ``start``)."""
    tokens = explanation.tokens or [[]]
    return "".join(tokens[0][int(explanation.options["start"]) :])


def explain_generation(
    causal_lm: Any,
    prompt: Any,
    *,
    max_new_tokens: int = 16,
    method: str = "integrated_gradients",
    **options: Any,
) -> Explanation:
    """Generate greedily from ``prompt`` and explain each generated token by the sequence before it.

    Args:
        causal_lm: a causal language model, next-token logits ``[B, T, V]`` (KerasHub's
            ``CausalLM``, or a Keras model of token ids ``[B, T]``).
        prompt: a string (tokenised by ``causal_lm.preprocessor``) or int token ids ``[P]``.
        max_new_tokens: the most tokens generated; generation also ends before the tokenizer's
            end token.
        method, options: as :func:`saliency_kit.explain` (``steps=``, ``baseline_token=``, ...).

    Returns the :class:`~saliency_kit.Explanation` of the ``K`` generated tokens over the
    ``T = P + K`` tokens of the sequence: ``attributions`` ``[1, K, T, D]``, ``maps`` ``[1, K, T]``
    (zero at and after each token's own position), ``scores`` ``[1, K]`` the log-probabilities,
    ``tokens`` the sequence's strings, ``options["start"] = P``. No token generated is a
    ``ValueError``.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int ≥ 1; received {max_new_tokens!r}.")
    ids = prompt_ids(causal_lm, prompt)
    tokenizer = _tokenizer(causal_lm)
    stop = getattr(tokenizer, "end_token_id", None)
    sequence = greedy(causal_lm, ids, max_new_tokens, stop=None if stop is None else int(stop))
    start = len(ids)
    if len(sequence) == start:
        raise ValueError(
            f"the model's first token after the prompt is its end token ({stop}): no generated text to explain."
        )
    inputs = model_inputs(causal_lm, sequence[None])
    result = explain(causal_lm, inputs, method=method, targets=generated(sequence[None], start=start), **options)
    token_maps = result.token_maps
    name = next((n for n, kind in (result.parts or {}).items() if kind == "embedding"), None)
    attributions = result.attributions_of(name) if name is not None else result.attributions
    single = Explanation(
        **{
            **{f: getattr(result, f) for f in result.__dataclass_fields__},
            "attributions": attributions,
            "maps": token_maps,
            "options": {**result.options, "start": start},
            "parts": None,
        }
    )
    return single.with_tokens([token_strings(causal_lm, sequence)])
