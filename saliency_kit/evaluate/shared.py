"""The options metrics share, read in one place: :class:`Shared`.

A metric's signature names its own options and ``seed`` and ``batch_size``; the options many
metrics share arrive among its ``**options`` and are read by :meth:`Shared.read`, each with the
metric's own default (Quantus' defaults differ between metrics)::

    shared = Shared.read(options, seed=seed, batch_size=batch_size, normalise=True, abs=False)
    scored = shared.prepare(model, inputs, explanation_or_method, targets)

A metric reads only the shared options it names defaults for; every other key of ``options`` is
an option of the method run when ``explanation_or_method`` names one (``attribute_to=`` among
them), as before. The model-free metrics read their pixel maps through :meth:`Shared.pixel_maps`
and :meth:`Shared.flat`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ._common import preprocess
from .explained import prepare
from .views import pixel_maps

if TYPE_CHECKING:
    import keras

    from .explained import Scored

__all__ = ["Shared", "SHARED_OPTIONS"]

#: The shared options, as a metric takes them (keyword -> field of :class:`Shared`).
SHARED_OPTIONS = MappingProxyType(
    {
        "normalise": "normalise",
        "abs": "absolute",
        "score": "score",
        "softmax": "softmax",
        "perturb_baseline": "perturb_baseline",
        "return_nan_when_prediction_changes": "nan_when_prediction_changes",
    }
)


@dataclass(frozen=True)
class Shared:
    """The options of one metric call that many metrics share.

    - ``normalise`` (``normalise=``): each map divided by its own largest magnitude (Quantus'
      ``normalise_by_max``, per map here);
    - ``absolute`` (``abs=``): the maps' magnitude, taken after normalising;
    - ``score`` (``score=``): what is scored, ``"logits"`` or the model's ``"output"``;
    - ``softmax`` (``softmax=``): the softmax of the target's scores is scored;
    - ``perturb_baseline`` (``perturb_baseline=``): what replaces a removed feature (``"black"``
      each input's minimum, ``"white"``, ``"mean"``, ``"uniform"``, a number or an array; for
      ``completeness`` and ``non_sensitivity`` also ``"method"``, the explaining method's own
      baseline, their default);
    - ``nan_when_prediction_changes`` (``return_nan_when_prediction_changes=``): a perturbed copy
      that changes the model's prediction for a target is left out (the robustness metrics);
    - ``seed``, ``batch_size``: the metric's draws' seed; inputs per forward pass;
    - ``method_options``: the rest of the metric's ``**options``, the method's.
    """

    normalise: bool = True
    absolute: bool = False
    score: str = "logits"
    softmax: bool = False
    perturb_baseline: Any = "black"
    nan_when_prediction_changes: bool = False
    seed: int = 0
    batch_size: int = 32
    method_options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, options: Mapping[str, Any], *, seed: int, batch_size: int, **defaults: Any) -> Shared:
        """The shared options a metric takes out of its ``options``: those named in ``defaults``
        (keywords of :data:`SHARED_OPTIONS`, with the metric's default values); every other key is
        kept in :attr:`method_options`."""
        unknown = sorted(set(defaults) - set(SHARED_OPTIONS))
        if unknown:
            raise TypeError(f"shared metric options are {', '.join(SHARED_OPTIONS)}; received {unknown}.")
        values = {SHARED_OPTIONS[key]: options.get(key, default) for key, default in defaults.items()}
        rest = {key: value for key, value in options.items() if key not in defaults}
        return cls(seed=seed, batch_size=batch_size, method_options=MappingProxyType(rest), **values)

    def prepare(
        self, model: keras.Model, inputs: Any, explanation_or_method: Any, targets: Any, *, perturbs: bool = True
    ) -> Scored:
        """:func:`~saliency_kit.evaluate.explained.prepare` with these options (``perturbs``: the
        metric evaluates the model on perturbed copies of what is explained)."""
        return prepare(
            model,
            inputs,
            explanation_or_method,
            targets,
            seed=self.seed,
            batch_size=self.batch_size,
            score=self.score,
            softmax=self.softmax,
            method_options=dict(self.method_options),
            perturbs=perturbs,
        )

    def pixel_maps(
        self,
        name: str,
        model: keras.Model | None,
        inputs: Any,
        explanation_or_method: Any,
        targets: Any,
        maps: np.ndarray | None,
        *,
        image: bool = False,
    ) -> np.ndarray:
        """The pixel maps ``[B, K, ...]`` metric ``name`` scores
        (:func:`~saliency_kit.evaluate.views.pixel_maps` with these options): the bare ``maps`` when
        given, else those of the explanation or method (``image``: of one image, for a metric that
        needs one image's axes)."""
        return pixel_maps(
            name,
            model,
            inputs,
            explanation_or_method,
            targets,
            maps,
            seed=self.seed,
            batch_size=self.batch_size,
            method_options=dict(self.method_options),
            image=image,
        )

    def flat(self, maps: np.ndarray) -> np.ndarray:
        """``maps [B, K, ...]`` after Quantus' preprocessing with these options (``normalise``, then
        ``absolute``), flattened: float64 ``[B, K, F]``."""
        values = preprocess(maps, normalise=self.normalise, absolute=self.absolute)
        return values.reshape(*values.shape[:2], -1)
