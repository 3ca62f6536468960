"""Which map can I trust? Metrics of explanations, and every method × metric compared.

Every metric is declared once where it is defined, ``@metric(name, family=..., higher_is_better=...,
needs_masks=...)`` (:mod:`.registry`); :func:`metrics` lists them (name, family, direction, whether
masks are needed), and ``compare``, ``saliency evaluate --metric``, the docs' metric table and this
package's metric names are made from that list; an installed distribution adds metrics through the
entry-point group ``saliency_kit.metrics``. Definitions and defaults are Quantus 0.6.0's (where
Quantus departs from its paper the docstring says which one is followed). One module per family:
faithfulness (:mod:`.faithfulness`, :mod:`.perturbation`, :mod:`.deletion`), robustness
(:mod:`.robustness`), localisation (:mod:`.localisation`, object masks ``[B, H, W]``), complexity
(:mod:`.complexity`), randomisation (:mod:`.randomisation` and :mod:`.mprt`, the model copies in
:mod:`.reinitialise`), axiomatic (:mod:`.axiomatic`). Beside the metrics: :func:`deletion_insertion`
(both curves, the signature of a metric), :func:`randomization_test` (modes
``"cascading"``, ``"independent"``, ``"mprt"``, ``"smooth_mprt"``, ``"efficient_mprt"``), and
:func:`compare`, every method × metric with a seeded ``"random"`` method always in the table
(:func:`iter_compare`: its rows one at a time). The options many metrics share (``normalise``,
``abs``, ``score``, ``softmax``, ``perturb_baseline``, ``return_nan_when_prediction_changes``) are
read in one place, :class:`~.shared.Shared`.

Every metric, and :func:`deletion_insertion` and :func:`randomization_test` beside them, is
``NAME(model, inputs, explanation_or_method="gradient", targets="top1", *, seed=0, batch_size=32,
**options)`` and returns float ``[B, K]`` (a dict with ``"score" [B, K]`` and the curve where the
metric has one; :func:`pointing_game` bool ``[B, K]``). The localisation metrics also need
``masks=``; the model-free ones take bare ``maps=`` instead of the first four. An
:class:`~saliency_kit.Explanation` is scored as it is; a method
name is run with :func:`saliency_kit.explain`. Maps are normalised per input, never over the batch,
and every perturbation is seeded per input: results do not depend on the batch or ``batch_size``.

Every target kind and input structure is taken, as by ``explain``:

- target objects (``sk.targets.region``, ``box``, ``output``, ``unit``, a list of them): every
  perturbed copy of an input is scored (and re-explained) with that input's target (a
  ``"predicted"`` region keeps the clean input's mask); ``softmax=True`` then scores the target's
  probability (a region's softmax over its classes; a head's, a unit's and a box's score as it
  is). An Explanation of a target object is scored with the same object given as ``targets=``.
  ROAD's and the robustness metrics' "prediction" and ``random_logit``'s other class are read
  among the target's own classes (a region's classes, a box's classes, a head's components, a
  layer's units); a list of targets has none, and is refused there;
- several model inputs (a list, tuple or dict) and token ids: the metrics perturb what is
  explained (``attribute_to=``, default as ``explain``'s), the other inputs held at each input's
  own values. One explained input (the image of an image + metadata model, token ids in
  embedding space) is scored in its own shape, the image metrics included; several are
  flattened side by side ``[B, E]``, and the metrics that need one image's axes (``infidelity``,
  ``road``, ``region_perturbation``, localisation) ask for ``attribute_to=``. An inner layer
  (``attribute_to=LAYER``) is not an input: the metrics that perturb refuse it.

Caveats, before reading any number: a metric's value depends on its baseline (what "removing" a
pixel means) and its perturbation; sensitivity metrics do not flag a random or constant map by
themselves; localisation rewards maps shaped like the object, not maps faithful to the model.
Compare methods on the same inputs and settings, and against the ``"random"`` row.
"""

from __future__ import annotations

# the family modules declare their metrics when imported, in this order (each family's order in metrics())
# isort: off
from . import faithfulness, perturbation, deletion, robustness, localisation  # noqa: F401
from . import complexity, randomisation, axiomatic  # noqa: F401

# isort: on
from .compare import compare, iter_compare
from .deletion import deletion_insertion
from .randomisation import compare_maps, comparison_maps, iter_randomization, randomization_test
from .registry import Metric, builtins, metric, metrics
from .reinitialise import clone_with_weights, reinitialize, weighted_layers

#: The function of every built-in metric, by its Python name (``sk.evaluate.NAME``), from the registry.
_DECLARED = {declared.function.__name__: declared.function for declared in builtins()}
globals().update(_DECLARED)

__all__ = [
    *_DECLARED,
    "deletion_insertion",
    "randomization_test",
    "iter_randomization",
    "compare_maps",
    "comparison_maps",
    "compare",
    "iter_compare",
    "metric",
    "metrics",
    "Metric",
    "clone_with_weights",
    "weighted_layers",
    "reinitialize",
]
