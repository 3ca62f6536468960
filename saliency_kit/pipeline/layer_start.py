"""Where a path (or a reference) starts when the explained part is an inner layer's output
(``attribute_to=LAYER``): integrated gradients, Guided IG and DeepLIFT start from a ``baseline``
in the space of what they explain, and a layer's space has no baseline of its own.

``layer_start="baseline"`` (the default, as Captum's layer integrated gradients): the start is
the layer's output when the model runs on the *baseline input*, so that integrated gradients'
completeness reads ``Σ a ≈ s(x) − s(x′)`` and DeepLIFT's sum is ``s(x) − s(x′)`` with ``x′``
that input, whenever every path from the inputs set to their baseline to the output goes
through the layer. ``attribute_to=`` an ``Embedding`` then gives the numbers the default
explanation of its token ids gives. ``layer_start="zero"``: the start is zero in the layer's
space.

The baseline input holds, for each model input:

* its entry of a ``baseline`` given per input (a dict keyed by input name, or a list in the
  inputs' order): token ids for token inputs, values for the others;
* otherwise, when the default explanation explains it (float inputs; token ids feeding an
  ``Embedding``, see :mod:`saliency_kit.pipeline.parts`): the method's default baseline for
  a float input, ``baseline_token`` at every position for token ids;
* otherwise (segment/position/type ids, masks, integers feeding no ``Embedding``): its own
  values, as Captum's ``additional_forward_args``.

Those held inputs must then be the same in every row when they reach the layer (the start is
one row, shared by every row of the call); a call whose rows differ there is refused. A
``baseline`` given as one value (not per input) is the start itself, in the layer's space.
Conductance's path lies in input space already and is not concerned.

Integrated gradients' ``completeness_gap`` compares with the score at the start (the layer at
its start, every path around the layer reading ``x``): ``s(x′)`` when the layer is a cut of the
model, as Captum's convergence delta then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from .. import engine
from ..engine.space import Space
from ..model.model_inputs import inputs_reaching
from .kinds import explained_by_default
from .parts import Parts, per_input

if TYPE_CHECKING:
    import keras

__all__ = ["LayerStart", "LAYER_STARTS", "check_layer_start", "layer_baselines"]

#: Where the path of a layer's attributions starts (see the module).
LayerStart = Literal["baseline", "zero"]
LAYER_STARTS: tuple = get_args(LayerStart)


def check_layer_start(value: Any) -> LayerStart:
    """``value`` if it is one of :data:`LAYER_STARTS`, else a ``ValueError``."""
    if not isinstance(value, str) or value not in LAYER_STARTS:
        raise ValueError(f"layer_start must be one of {list(LAYER_STARTS)}; received {value!r}.")
    return value  # type: ignore[return-value]


def layer_baselines(
    model: keras.Model,
    parts: Parts,
    run: list,
    space: Space,
    options: dict,
    *,
    given: dict,
    defaults: dict,
    baseline_token: int,
    layer_start: LayerStart,
    batch_size: int,
) -> dict:
    """``options`` of one run (``run``: some of ``parts.parts``, laid out by ``space``) with its
    ``baseline`` starting every layer part at that layer's output at the baseline input (see the
    module): one row ``space.shape`` (the parts packed side by side when several), the input
    parts' entries kept. Unchanged when no part is a layer, the method takes no ``baseline``,
    ``layer_start="zero"``, or ``given`` (the options as the user gave them) holds one
    ``baseline`` for every part. The layers' outputs come from one batched forward pass."""
    layers = [part for part in run if part.input is None]
    if not layers or "baseline" not in defaults or layer_start == "zero":
        return options
    entries = per_input(given["baseline"], parts.names) if "baseline" in given else {}
    if entries is None:
        return options  # one baseline for every part: the start itself, in the layer's space
    reaching = set().union(*(inputs_reaching(model, part.layer) for part in layers))
    inputs = _baseline_input(model, parts, entries, defaults["baseline"], baseline_token, reaching)
    starts = engine.activations(model, inputs, tuple(part.layer for part in layers), batch_size=batch_size)
    current = np.broadcast_to(np.asarray(options.get("baseline", defaults["baseline"]), np.float64), space.shape)
    pieces = space.unpack(current[None], lead=1)
    for i, part in enumerate(run):
        if part.input is None:
            pieces[i] = np.asarray(starts[part.layer], np.float64)
    return {**options, "baseline": space.pack(pieces)[0]}


def _baseline_input(model: keras.Model, parts: Parts, entries: dict, default: Any, token: int, reaching: set) -> list:
    """The baseline input, one row per model input ``[1, ...]`` (graph order; see the module)."""
    out = []
    for index, (name, held) in enumerate(zip(parts.names, parts.held)):
        integer = np.issubdtype(held.dtype, np.integer)
        row_shape = (1, *held.shape[1:])
        if name in entries:
            value = entries[name]
            if integer and not np.issubdtype(np.asarray(value).dtype, np.integer):
                raise ValueError(
                    f"the baseline of token input {name!r} must be token ids to run the model on; received "
                    f"dtype {np.asarray(value).dtype}."
                )
        elif not integer:
            value = default
        elif explained_by_default(model, index, name) is not None:
            value = token
        else:
            if index in reaching and np.any(held != held[:1]):
                raise ValueError(
                    f"input {name!r} is held at its values, which differ between rows and reach the explained "
                    "layer, so the layer's output at the baseline input differs per row; explain rows with the "
                    "same such values together, give baseline= in the layer's space, or layer_start='zero'; "
                    f"received {len(held)} rows."
                )
            out.append(held[:1])
            continue
        try:
            out.append(np.broadcast_to(np.asarray(value).astype(held.dtype), row_shape))
        except ValueError:
            raise ValueError(
                f"the baseline of input {name!r} must be a number or an array broadcastable to one row of it "
                f"{list(held.shape[1:])}; received shape {list(np.shape(value))}."
            ) from None
    return out
