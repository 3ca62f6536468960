"""The public entry points: :func:`explain` and :func:`jacobian`.

``explain`` checks everything before any work (method, options, score, batch size, inputs,
targets), resolves ``"topK"`` targets with one batched forward pass, runs the method's function
through the engine and builds the :class:`~saliency_kit.Explanation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import engine, methods
from ..explanation import Explanation
from ..model.scores import score_columns
from ..targets.base import Resolved
from .parts import Parts
from .prepare import check_options, prepare, resolve_parts
from .request import ExplainCall, resolve_request
from .results import explain_prepared

if TYPE_CHECKING:
    import keras

__all__ = ["check", "explain", "jacobian", "resolve_selection", "resolve_targets"]

#: ``explain``'s keywords that say what to explain rather than configure the method: they come
#: through ``**options`` and are documented with them.
REQUEST_OPTIONS = ("attribute_to", "baseline_token", "layer_start")


def resolve_targets(
    model: keras.Model,
    x: Any,
    targets: Any,
    *,
    score: str = "logits",
    batch_size: int = 32,
    class_names: Sequence[str] | None = None,
) -> np.ndarray:
    """Any target form for ``model`` and checked inputs ``x`` as int ``[B, K]`` (the columns).

    ``"topK"`` costs one batched forward pass (through the engine); a callable gives its column
    indices ``arange(K)`` per row. Raises like :func:`explain`.
    """
    return resolve_selection(model, x, targets, score=score, batch_size=batch_size, class_names=class_names).columns


def resolve_selection(
    model: keras.Model,
    x: Any,
    targets: Any,
    *,
    score: str = "logits",
    batch_size: int = 32,
    class_names: Sequence[str] | None = None,
) -> Resolved:
    """Any target form (target objects included) as a :class:`saliency_kit.targets.Resolved`:
    ``columns`` int ``[B, K]``, ``payload``, ``info`` (what each column explains) and ``target``
    (the bound target object). Raises like :func:`explain`."""
    return resolve_request(model, x, targets, score, batch_size, class_names)


def explain(
    model: keras.Model,
    inputs: Any,
    method: Any = "gradient",
    targets: Any = "top1",
    *,
    score: str = "logits",
    batch_size: int = 32,
    class_names: Sequence[str] | None = None,
    input_keys: Any = None,
    channels_axis: int | None = None,
    with_scores: bool = True,
    **options: Any,
) -> Explanation:
    """Explain ``model``'s scores for ``inputs`` with ``method``.

    Args:
        model: a Keras model (functional, Sequential, or subclassed and built). It is never
            changed; it runs with ``training=False``.
        inputs: array-like ``[B, ...]`` already in the model's input space (images
            ``[B, H, W, C]``, sequences ``[B, T, F]``, tabular ``[B, F]``), floating point; or,
            for a model with several inputs, a list, tuple or dict (keyed by input name) of them
            (token ids and masks as integers). ``attributions`` and ``maps`` then come in the
            same structure, one entry per explained input (``Explanation.parts`` names them).
        method: one of :func:`saliency_kit.methods.names` (see that package for each formula and
            map reduction), a built-in or a registered one.
        targets: an int (every input), a sequence of ``B`` ints or class names, an int array
            ``[B, K]``, ``"topK"`` (the K best classes of each input, best first), a class name,
            or a callable ``score_fn(values) -> [B] or [B, K]`` where ``values`` are what
            ``score`` selects (logits by default). For models whose output is not ``[B, C]``: a
            target object of :mod:`saliency_kit.targets` (``region`` of a segmentation, ``box``
            of a detector, ``output`` of a multi-output model, ``unit`` inside, a ``Target`` of
            your own) or a list of them (their columns side by side); every method takes them.
        score: ``"logits"`` — differentiate the values before a final softmax/sigmoid when the
            model has one (fused in a layer or separate) — or ``"output"``.
        batch_size: the most model evaluations (inputs × classes × samples × steps) per
            compiled call. Results do not depend on it.
        class_names: a list of str or a ``ModelSpec`` (whose ``gradcam_layer`` then is the CAM
            methods' default layer): targets may be class names.
        input_keys: one int in ``[0, 2**31)`` per input, keying its seeded noise (SmoothGrad's
            noisy copies, every method drawing noise through ``ctx.normal``): an input with the
            same key, seed and options gets the same noise whichever call or batch position it
            is in. Default: the input's position. ``saliency batch`` passes a hash of each
            image's path, so its outputs do not depend on how images are batched.
        channels_axis: the axis of ``inputs`` holding the channels: ``1`` (``[B, C, H, W]``) or
            ``-1`` (``[B, H, W, C]``). Default ``None``: found from the model (its layers'
            ``data_format``, or, when it transposes its input before its first convolution as
            models converted from PyTorch do, by following the graph to it); where it cannot be
            told, a ``ValueError`` asks for it.
        with_scores: ``False`` leaves ``Explanation.scores`` ``None``: the methods that do not
            meet the targets' scores on their way (SmoothGrad, Guided IG, Blur IG, expected
            gradients, XRAI, RISE) then skip the batched forward pass that computes them.
        **options: the method's options (``saliency_kit.methods.get(m).options``), and what to
            explain when it is not every input:

            - ``attribute_to``: the name (or position) of an input, a list of them, or an inner
              layer (a name, a path ``"outer/inner"``, or the layer): attributions of that
              layer's output ``[B, K, *layer output]``. Default: every float input, and integer
              inputs feeding an ``Embedding`` (token ids, explained in embedding space:
              attributions ``[B, K, T, D]``, maps ``[B, K, T]``; segment/position/type ids and
              masks are held); inputs not explained keep their values. With
              ``method="conductance"``, the layer whose conductance is wanted.
            - ``baseline_token``: the token id whose embedding is the baseline of token inputs
              (IG, DeepLIFT) and occlusion's replacement; default 0, the padding id.
            - ``layer_start``: where the path (DeepLIFT: the reference) of an inner layer's
              attributions starts when no ``baseline`` is given in the layer's space.
              ``"baseline"`` (default, as Captum's layer integrated gradients): the layer's
              output when the model runs on the baseline input (the explained inputs at their
              baseline, token ids at ``baseline_token``, the others at their values, which must
              then be the same in every row where they reach the layer), so completeness reads
              ``s(x) − s(baseline input)`` and ``attribute_to=`` an ``Embedding`` gives the
              default explanation's numbers. ``"zero"``: zero in the layer's space.

    Returns:
        an :class:`~saliency_kit.Explanation`; its ``target_info[b][k]`` says what column k of
        input b explains; its ``options`` are the method's options as used (defaults and a
        drawn seed included) and ``"score"``: what was differentiated, ``"output"`` when
        ``score="logits"`` could not look behind the model's final softmax/sigmoid.

    Raises:
        TypeError: wrong types (model, inputs, options, targets).
        ValueError: unknown method or option, bad values — before any model evaluation.
    """
    chosen = methods.get(method)
    request = {name: options.pop(name) for name in REQUEST_OPTIONS if name in options}
    settings: dict[str, Any] = dict(score=score, batch_size=batch_size, class_names=class_names, input_keys=input_keys)
    with_scores = _flag("with_scores", with_scores)
    call = ExplainCall(
        model, inputs, method, chosen, targets, **settings, channels_axis=channels_axis, with_scores=with_scores,
        options=options, **request,
    )  # fmt: skip
    with engine.one_call(model):
        return explain_prepared(prepare(call))


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; received {value!r}.")
    return bool(value)


def check(
    model: keras.Model,
    inputs: Any,
    method: Any = "gradient",
    *,
    score: str = "logits",
    batch_size: int = 32,
    class_names: Sequence[str] | None = None,
    channels_axis: int | None = None,
    **options: Any,
) -> dict:
    """Check what :func:`explain` checks before any work — the method and its options (with the
    method's own ``prepare``: a layer the model lacks, a baseline of the wrong shape), ``score``,
    ``batch_size``, the inputs against the model and their channel axis (``channels_axis`` as
    :func:`explain` takes it) — without explaining. Returns the method's options
    as :func:`explain` would use them (defaults filled in, a seed drawn). Raises as :func:`explain`."""
    chosen = methods.get(method)
    request = {name: options.pop(name) for name in REQUEST_OPTIONS if name in options}
    settings: dict[str, Any] = dict(
        score=score, batch_size=batch_size, class_names=class_names, channels_axis=channels_axis
    )
    return check_options(ExplainCall(model, inputs, method, chosen, **settings, options=options, **request))


def jacobian(
    model: keras.Model,
    inputs: Any,
    classes: Any = None,
    *,
    score: str = "logits",
    rule: Any = None,
    batch_size: int = 32,
) -> np.ndarray:
    """Per-class gradients ``[B, K, *inputs.shape[1:]]`` (float32): row k is ``∂s_k/∂x``.

    Args:
        classes: class indices (a sequence of K ints, the same for every input, or an int array
            ``[B, K]``); default every output class.
        score: ``"logits"`` or ``"output"``, as in :func:`explain`.
        rule: ``None``, ``"guided"``, ``"deconv"`` or a ``ModifiedBackprop``: the jacobian
            through ``sk.rewrite(model, rule)``.
        batch_size: the most (input × class) gradients per compiled call.

    The forward pass of each chunk of inputs is shared by its classes, so K classes cost far
    less than K calls.
    """
    engine.check_score(score)
    batch_size = engine.check_batch_size(batch_size)
    x = engine.check_inputs(model, inputs)
    columns = score_columns(model)
    if columns is None:
        raise ValueError(
            "jacobian needs a model whose output is [batch, classes]; received a model whose output is not."
        )
    if classes is None:
        classes = np.arange(columns)
    array = np.asarray(classes)
    if array.ndim == 1:
        array = np.tile(array, (len(x), 1))
    elif array.ndim == 0:
        array = np.full((len(x), 1), array)
    selection = resolve_parts(model, Parts.single(x), array, score, batch_size)
    return engine.gradients(model, x, selection, score=score, rule=rule, batch_size=batch_size)
