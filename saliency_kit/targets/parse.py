"""Class targets: the one parser of class target requests (no model runs, no gradients).

Used by ``sk.explain``, the command line and ``saliency sanity`` alike: :func:`parse` (every class form: an
``int``, a sequence of ``B``
  ints or class names, an array ``[B, K]``, ``"topK"``, a class name),
  :func:`parse_string` (one command-line ``--target``), :func:`combine` (several of them) and
  :func:`resolve` (a spec and, for ``topK``, the scores → int ``[B, K]``). Everything is
  checked *before* any model evaluation.

  Strings: ``"topK"`` in any case (``"top1"``, ``"TOP5"``); a string of digits is a class
  index; anything else is a class name, matched case-insensitively (an unknown name gets the
  closest names in the message). A string of digits that is also the *name* of another class
  is refused as ambiguous (the message gives the index of the class so named), never guessed.

Scores (logits behind a softmax, taps on inner layers) live in :mod:`saliency_kit.model.scores`.
"""

from __future__ import annotations

import difflib
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "TargetSpec",
    "parse",
    "parse_string",
    "combine",
    "resolve",
    "class_names_of",
]


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetSpec:
    """A checked target request: ``parts`` in order, each ``("top", K)``, ``("class", index)``
    (every input) or ``("classes", int array [B, k])``.

    Resolved by :func:`resolve` to int ``[B, ΣK]``, the columns of the parts side by side.
    """

    parts: tuple = ()

    @property
    def kind(self) -> str:
        """``"top"`` (needs the scores), or ``"classes"``."""
        return "top" if self.needs_scores else "classes"

    @property
    def needs_scores(self) -> bool:
        """Whether resolving needs the scores of every class (a ``topK`` part)."""
        return any(part[0] == "top" for part in self.parts)


def class_names_of(class_names: Any) -> list[str] | None:
    """``class_names`` (a list of str, or a ``ModelSpec``) as a list, or ``None``."""
    if class_names is None:
        return None
    names = getattr(class_names, "class_names", class_names)
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"class_names must be a list of str or a ModelSpec; received {class_names!r}.")
    return list(names)


def _top(text: str, k: int, num_classes: int) -> tuple:
    if k < 1:
        raise ValueError(f"targets string must look like 'top1' or 'top5' (K ≥ 1); received {text!r}.")
    if k > num_classes:
        raise ValueError(
            f"targets={text!r} asks for {k} classes but the model has {num_classes}; use top1 ... "
            f"top{num_classes}; received {text!r}."
        )
    return ("top", k)


def _check_index(index: int, num_classes: int) -> int:
    if not 0 <= index < num_classes:
        raise ValueError(
            f"target class {index} is out of range: the model has {num_classes} classes, so targets "
            f"must lie in [0, {num_classes - 1}]; received {index}."
        )
    return index


def _name_index(text: str, names: Sequence[str] | None) -> int:
    """The index of the class called ``text`` (exactly, else case-insensitively)."""
    if names:
        exact = [i for i, name in enumerate(names) if name == text]
        lowered = [n.lower() for n in names]
        key = text.strip().lower()
        if (
            len(exact) > 1
            or not exact
            and lowered.count(key) > 1
            and len({names[i] for i, n in enumerate(lowered) if n == key}) == 1
        ):
            same = exact or [i for i, n in enumerate(lowered) if n == key]
            raise ValueError(
                f"class name {text!r} names several classes ({', '.join(map(str, same))}); give "
                f"the class index instead; received {text!r}."
            )
        if exact:
            return exact[0]
        if lowered.count(key) == 1:
            return lowered.index(key)
        if lowered.count(key) > 1:
            raise ValueError(
                f"class name {text!r} matches several classes when case is ignored; give its "
                f"exact spelling; received {text!r}."
            )
        close = difflib.get_close_matches(key, lowered, n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(names[lowered.index(c)]) for c in close)}?" if close else ""
        sample = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise ValueError(
            f"targets string must look like 'top1' or 'top5', a class index or a class name "
            f"(the classes are {sample}).{hint} Received {text!r}."
        )
    raise ValueError(
        "targets string must look like 'top1' or 'top5' or a class index (this model has no class "
        f"names; pass class_names= to use names); received {text!r}."
    )


def parse_string(text: str, num_classes: int, class_names: Sequence[str] | None = None) -> TargetSpec:
    """One target string (a command-line ``--target``): ``"topK"`` in any case, a class index
    (digits) or a class name (case-insensitive). ``ValueError`` saying what was expected."""
    if not isinstance(text, str):
        raise TypeError(f"a target string must be a str; received {text!r}.")
    names = class_names_of(class_names)
    stripped = text.strip()
    match = re.fullmatch(r"top(\d+)", stripped, flags=re.IGNORECASE)
    if match:
        return TargetSpec((_top(text, int(match.group(1)), num_classes),))
    if re.fullmatch(r"-?\d+", stripped):
        index = int(stripped)
        if names and stripped in names and names.index(stripped) != index:
            raise ValueError(
                f"target {text!r} is ambiguous: a string of digits is a class index, and {stripped!r} is "
                f"also the name of class {names.index(stripped)}; give {names.index(stripped)} for that "
                f"class, or the name of class {index} for class {index}; received {text!r}."
            )
        return TargetSpec((("class", _check_index(index, num_classes)),))
    return TargetSpec((("class", _check_index(_name_index(text, names), num_classes)),))


def combine(specs: Sequence[TargetSpec]) -> TargetSpec:
    """Several specs side by side (``--target top2 --target star``): their columns in order."""
    parts = tuple(part for spec in specs for part in spec.parts)
    if not parts:
        raise ValueError(f"combine takes one or more target specs; received {list(specs)!r}.")
    return TargetSpec(parts)


def parse(
    targets: Any, num_inputs: int, num_classes: int | None, class_names: Sequence[str] | None = None
) -> TargetSpec:
    """Check ``targets`` against ``num_inputs`` inputs and ``num_classes`` outputs.

    Every class form: an ``int`` (every input), a sequence of ``num_inputs`` ints or class
    names (one per input), an int array ``[B, K]`` or a string (see :func:`parse_string`).
    ``class_names``: a list of str or a ``ModelSpec``. Raises ``TypeError`` for wrong types
    (booleans, floats, callables, other objects) and ``ValueError`` for wrong values (out of range,
    wrong length, unknown names), saying what was expected and what was received. Nothing is
    evaluated. A callable is a target of its own (:func:`saliency_kit.targets.as_target`).
    """
    if callable(targets) and not isinstance(targets, (str, bytes)):
        raise TypeError(
            "parse reads class targets; a callable score function is a target of its own: "
            f"sk.targets.as_target(score_fn); received {targets!r}."
        )
    if num_classes is None:
        raise ValueError(
            "class targets need a model whose output is [batch, classes]; this model's output "
            "is not. Pass targets=score_fn, a callable returning a [B] or [B, K] score tensor; "
            f"received {targets!r}."
        )
    if isinstance(targets, str):
        return parse_string(targets, num_classes, class_names)
    if isinstance(targets, (bool, np.bool_)):
        raise TypeError(f"targets must be a class index, not a boolean; received {targets!r}.")
    if isinstance(targets, numbers.Integral):
        return TargetSpec((("class", _check_index(int(targets), num_classes)),))
    if isinstance(targets, (numbers.Real, np.floating)):
        raise TypeError(
            f"targets must be an int class index (or 'topK', a class name, a sequence, an array or a "
            f"callable), not a float; received {targets!r}."
        )
    if isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) for t in targets):
        names = class_names_of(class_names)
        if len(targets) != num_inputs:
            raise ValueError(f"targets must name one class per input ({num_inputs}); received {len(targets)} names.")
        indices = [parse_string(t, num_classes, names).parts[0] for t in targets]
        if any(kind != "class" for kind, _ in indices):
            raise ValueError(f"a sequence of targets holds one class per input, not 'topK'; received {targets!r}.")
        return TargetSpec((("classes", np.array([[i] for _, i in indices], np.int64)),))
    try:
        array = np.asarray(targets)
    except Exception as err:  # ragged lists and the like
        raise ValueError(f"targets could not be read as an array ({err}); received {targets!r}.") from None
    if array.dtype == object:
        raise ValueError(f"targets could not be read as an array of class indices; received {targets!r}.")
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.integer)
        or (np.issubdtype(array.dtype, np.floating) and np.all(np.mod(array, 1) == 0))
    ):
        raise ValueError(f"targets must hold integer class indices; received dtype {array.dtype}.")
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[0] != num_inputs or array.shape[1] < 1:
        raise ValueError(
            f"targets must be an int, 'topK', a class name, a callable, a sequence of {num_inputs} ints "
            f"(one per input) or an array [{num_inputs}, K]; received an array of shape "
            f"{tuple(np.shape(targets))}."
        )
    classes = array.astype(np.int64)
    bad = classes[(classes < 0) | (classes >= num_classes)]
    if bad.size:
        _check_index(int(bad.flat[0]), num_classes)
    return TargetSpec((("classes", classes),))


def resolve(spec: TargetSpec, scores: Any = None, num_inputs: int | None = None) -> np.ndarray:
    """Turn a :class:`TargetSpec` into int ``[B, K]``.

    ``scores`` ``[B, C]`` (the scores of every class) are needed when the spec has a ``topK``
    part: the K best classes, best first (ties in class order). ``num_inputs`` gives ``B`` when
    there are no scores.
    """
    if scores is not None:
        num_inputs = len(scores)
    if num_inputs is None:
        raise ValueError("resolving targets needs the number of inputs: give scores or num_inputs; received neither.")
    order = np.zeros((num_inputs, 0), np.int64)  # read by "topK" parts only
    if spec.needs_scores:
        if scores is None:
            raise ValueError("resolving 'topK' targets needs the scores of every class; received scores=None.")
        # a stable sort keeps ties in class order, so the choice is reproducible
        order = np.argsort(-np.asarray(scores, np.float64), axis=1, kind="stable")
    columns = []
    for kind, value in spec.parts:
        if kind == "top":
            columns.append(order[:, :value])
        elif kind == "class":
            columns.append(np.full((num_inputs, 1), value))
        else:
            columns.append(value)
    return np.concatenate(columns, axis=1).astype(np.int64)
