"""What every method shares: the request it receives, the result it returns, map reductions and
the registry."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Request:
    """One checked ``explain`` call: everything a method needs besides its own options.

    ``inputs`` ``[B, ...]`` in the model's input dtype; ``targets`` int ``[B, K]`` indexing the
    score vector (classes, or the columns of ``score_fn``).
    """

    model: object
    inputs: np.ndarray
    targets: np.ndarray
    score: str = "logits"
    score_fn: Callable | None = None
    batch_size: int = 32

    @property
    def view_args(self) -> dict:
        return {"score": self.score, "score_fn": self.score_fn, "batch_size": self.batch_size}


@dataclass
class Result:
    """What a method computes; :func:`saliency_kit.explain` wraps it in an ``Explanation``."""

    attributions: np.ndarray
    maps: np.ndarray
    scores: np.ndarray
    options: dict
    layer: str | None = None
    completeness_gap: np.ndarray | None = None


def reduce_map(attributions: np.ndarray, how: str) -> np.ndarray:
    """``[B, K, ..., C] -> [B, K, ...]``: one value per position, reduced over the last axis.

    ``"abs_max"``: max |a| over channels (Simonyan et al.); ``"sum"``: signed sum (keeps the
    completeness of integrated gradients); ``"mean"``: mean. ``"none"``: already a map.
    """
    if how == "none":
        return attributions.astype(np.float32)
    if how == "abs_max":
        return np.abs(attributions).max(axis=-1).astype(np.float32)
    if how == "sum":
        return attributions.sum(axis=-1, dtype=np.float32)
    if how == "mean":
        return attributions.mean(axis=-1, dtype=np.float32)
    raise ValueError(f"unknown map reduction {how!r}")


@dataclass(frozen=True)
class Method:
    """A registered attribution method.

    ``compute(request, **options) -> Result``; ``defaults`` lists every option with its default;
    ``check(request, **options)`` raises ``ValueError`` for bad option values, before any work;
    ``cam`` marks methods whose attributions are ``[B, K, H, W]`` maps on a layer;
    ``warn_zero=False`` for methods whose maps are legitimately all zero (a CAM after its ReLU).
    """

    name: str
    summary: str
    compute: Callable[..., Result]
    defaults: dict = field(default_factory=dict)
    cam: bool = False
    warn_zero: bool = True  # all-zero maps suggest a score that ignores the input (not for CAMs)
    check: Callable[..., None] | None = None  # check(request, **options): ValueError, no work

    def validate(self, request: "Request", options: dict) -> None:
        """Check option values against the request (targets not yet resolved) before any work."""
        if self.check is not None:
            self.check(request, **options)

    def options(self, given: dict, extra_allowed: tuple = ()) -> dict:
        """``given`` completed with the defaults; unknown names raise ``ValueError``."""
        unknown = sorted(set(given) - set(self.defaults) - set(extra_allowed))
        if unknown:
            allowed = sorted({*self.defaults, *extra_allowed})
            raise ValueError(
                f"method {self.name!r} has no option {', '.join(map(repr, unknown))}; "
                f"its options are: {', '.join(allowed) or 'none'}."
            )
        return {**self.defaults, **given}


REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    REGISTRY[method.name] = method
    return method


def check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int; received {value!r}.")
    return int(value)


def check_choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; received {value!r}.")
    return value
