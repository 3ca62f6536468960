"""Moved: model rewriting lives in :mod:`saliency_kit.model.rewrite`, copying in
:mod:`saliency_kit.model.copy`. These names stay importable from here."""
from __future__ import annotations

from .model.copy import copy_model
from .model.rewrite import find_relu_activations, rewrite

__all__ = ["rewrite", "find_relu_activations", "copy_model"]
