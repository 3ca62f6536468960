"""The attribution engine: the one place that compiles, batches and caches model evaluations.

It knows no method by name. It offers primitives:

* :func:`run` — a method's function ``compute(ctx, **options)`` compiled into one batched kernel
  per (model, method, options, input shape, chunk layout) and run over chunks of inputs and
  groups of target classes, on the backend :func:`.backend.active` returns; inside, the
  :class:`~saliency_kit.engine.tf_context.Context` gives batched
  gradients of the target scores at any points, forward scores, a layer's activations and their
  gradients, and running sums over blocks (memory stays one chunk whatever samples/steps are);
* :func:`all_scores` / :func:`forward_scores` — scores without gradients (``"topK"`` targets,
  deletion curves);
* :func:`gradients` — the jacobian rows ``∂s_k/∂x`` (``sk.jacobian``);
* :func:`check_inputs`, :func:`score_view`, :func:`rewritten_model` and the counters
  :func:`trace_count` / :func:`call_count` (tests use them to prove reuse).

:func:`run` and its kernels are here; the forward passes are in :mod:`.forward`, the model
views (score views, rewritten models, fingerprints) in :mod:`.views`, the kernel cache and the
counters in :mod:`.cache`.

Performance by design: every kernel is a ``tf.function`` with a fixed input signature; the last
chunk of a batch is padded to the chunk size, so a new batch never retraces; chunk sizes are
powers of two up to the budget. A compiled call evaluates at most ``batch_size`` model rows
(inputs × classes × copies): see :mod:`.chunking`. Caches are bounded (:mod:`.cache`). The K
target scores of an input share its forward pass; their K backward passes run in a loop inside
the kernel (vectorised with ``pfor`` on a GPU).

Dtypes: the model runs in its own dtype policy (mixed precision included); running sums of
16-bit values are kept in float32 and results leave as float32 NumPy arrays.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import chunking
from . import payload as payload_module
from .backend import active as active_backend
from .cache import KERNELS, KERNELS_PER_MODEL, call_count, count_call, kernel_count, trace_count, traced, value_key
from .chunking import check_batch_size
from .forward import activations, all_scores, forward_scores, outputs
from .inputs import channel_axis, check_array, check_channels_axis, check_inputs, check_score, layer_channel_axis
from .job import Job
from .payload import PerInput
from .spec import KernelSpec
from .views import clear_views, fingerprint, one_call, rewritten_model, score_view, views_of

if TYPE_CHECKING:
    import keras

__all__ = [
    "check_inputs",
    "check_array",
    "check_batch_size",
    "channel_axis",
    "check_channels_axis",
    "check_score",
    "layer_channel_axis",
    "score_view",
    "rewritten_model",
    "run",
    "Job",
    "gradients",
    "all_scores",
    "outputs",
    "forward_scores",
    "activations",
    "target_scores",
    "trace_count",
    "call_count",
    "kernel_count",
    "clear_cache",
    "KERNELS_PER_MODEL",
    "fingerprint",
    "one_call",
]


def clear_cache() -> None:
    """Forget every compiled kernel, score view and rewritten model."""
    KERNELS.clear()
    clear_views()


# ------------------------------------------------------------------------------------ kernels
def _split_options(options: dict) -> tuple[tuple, tuple[str, ...], tuple]:
    """``(constants key, array names, arrays)``: NumPy arrays become kernel arguments."""
    arrays = {k: v for k, v in options.items() if isinstance(v, np.ndarray)}
    constants = {k: v for k, v in options.items() if k not in arrays and k != "seed"}
    key = tuple(sorted((k, value_key(_tupled(v))) for k, v in constants.items()))
    names = tuple(sorted(arrays))
    return key, names, tuple(arrays[k] for k in names)


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def run(compute: Callable, job: Job, *, with_scores: bool = True) -> dict:
    """Run ``compute(ctx, **job.options)`` over the job's rows and resolved target (:class:`Job`).

    The compiled kernel is one per (model, method, options, row shape, chunk layout, target kind,
    payload layout, space), reused. The target's payload is sliced with the rows and the column
    groups and passed to the kernel as tensors; ``job.options``' NumPy arrays and ``seed`` are
    tensors too, everything else is a constant of the kernel. ``with_scores=False``: no
    ``"scores"`` in the results, and no forward pass of their own for a method whose kernel does
    not compute them on the way (when it does not, the scores are read from the score vectors
    ``"topK"`` targets were ranked by, or one batched forward pass computes them).

    Returns NumPy float32 ``{"attributions": [B, K, ...], "scores": [B, K], **extras}``, and
    ``"rewritten"`` (a list of str, :func:`_rewritten_by`) when the method used a backward rule."""
    model, inputs, selection, options, score = job.model, job.rows, job.selection, job.options, job.score
    channel_axis, layer_axis, space, held = job.channel_axis, job.layer_axis, job.space, job.held
    backend = active_backend()
    batch_size = check_batch_size(job.batch_size)
    targets, target, payload = np.asarray(selection.columns), selection.target, selection.payload
    B, K = targets.shape
    shape, dtype = inputs.shape[1:], inputs.dtype
    layout = chunking.layout(batch_size, B, K, job.cost)
    constants, array_names, arrays = _split_options(options)
    seed = int(options.get("seed") or 0)
    structure, per_input, leaves = payload_module.layout(_with_held(payload, space, held), B, K)
    key = (
        "run",
        "Job",
        compute,
        score,
        constants,
        tuple((a.shape, a.dtype.str) for a in arrays),
        shape,
        dtype.name,
        layout,
        channel_axis,
        layer_axis,
        fingerprint(model),
        target.kernel_key(),
        payload_module.key(structure, per_input, leaves),
        None if space is None else space.key(),
    )

    def build() -> tuple[Callable, list, list, Any]:
        rules_used: list = []
        reports: list = []
        spec = KernelSpec(
            compute=compute,
            options={k: v for k, v in options.items() if k not in array_names},
            array_names=array_names,
            array_specs=[backend.array_spec(a) for a in arrays],
            views=views_of(model, score, rules_used),
            layout=layout,
            shape=shape,
            dtype=dtype,
            vectorise=backend.vectorise_classes(model),
            traced=traced,
            reports=reports,
            doing=f"{getattr(compute, '__name__', 'the method')} on model {model.name!r}",
            channel_axis=channel_axis,
            layer_axis=layer_axis,
            target=kernel_target,
            payload=(structure, per_input, payload_module.specs(per_input, leaves, layout.n, layout.group)),
            space=space,
        )
        kernel = backend.build_kernel(spec)
        return kernel, rules_used, reports, kernel_target

    kernel_target: list = [target]
    kernel, rules_used, reports, holder = KERNELS.get(model, key, build)
    holder[0] = target  # a kernel whose first trace failed is traced again, with the current target
    for rule in rules_used:
        rewritten_model(model, rule)  # refresh the rewritten copies' weights
    n, group = layout.n, layout.group
    results: dict = {}
    seed_words, keys = _key_words(seed, job.keys, B)
    for start in range(0, B, n):
        stop = min(start + n, B)
        x = chunking.pad(inputs[start:stop], n)
        index = chunking.pad(np.arange(start, stop, dtype=np.int32), n)
        chunk_keys = chunking.pad(keys[start:stop], n)
        for k0, k1, columns in chunking.class_groups(targets[start:stop], group):
            count_call()
            chunk_payload = chunking.payload_slice(leaves, per_input, start, stop, n, k0, k1, group)
            out = kernel(
                x, chunking.pad(columns, n).astype(np.int32), index, chunk_keys, seed_words, chunk_payload, *arrays
            )
            for name, value in out.items():
                value = backend.to_numpy(value)
                if name not in results:
                    results[name] = np.zeros((B, K, *value.shape[2:]), np.float32)
                results[name][start:stop, k0:k1] = value[: stop - start, : k1 - k0]
    if not with_scores:
        results.pop("scores", None)
    elif "scores" not in results:  # the method took no gradient at the inputs themselves
        results["scores"] = _scores_at(job.with_(cost=1))
    rewritten = _rewritten_by(model, rules_used, reports)
    if rewritten is not None:
        results["rewritten"] = rewritten
    return results


def _key_words(seed: int, keys: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(seed words uint32 [2], key words uint32 [count, 2])``: the draws' generator keys
    (:func:`saliency_kit.engine.draws.words`) of the seed and of each row's noise key (its
    position when ``keys`` is None)."""
    from .draws import words  # imports Keras: `import saliency_kit.engine` stays framework-free

    rows = np.arange(count, dtype=np.int64) if keys is None else np.asarray(keys, np.int64)
    return words(np.int64(seed)), words(rows)


def _with_held(payload: Any, space: Any, held: Any) -> Any:
    """The payload a kernel gets: the target's, and in a space the held model inputs beside it
    (those no part replaces, :attr:`Space.held_inputs`; per input, so chunked and repeated with
    the rows). Nothing when the parts replace every input and the target has no payload."""
    if space is None or not space.held_inputs and payload is None:
        return payload
    wrapped: dict = {"held": tuple(PerInput(np.asarray(held[i])) for i in space.held_inputs)}
    if payload is not None:
        wrapped["target"] = payload
    return wrapped


def _rewritten_by(model: keras.Model, rules_used: Any, reports: Any) -> list | None:
    """What the kernel's backward rules changed: the ReLU-family ops an op-level rule took over
    (one block's report: every block traces the same model), then the layers a rewrite changed
    (LRP, DeepLIFT); ``None`` when the kernel took plain gradients only."""
    if not reports and not rules_used:
        return None
    changed = list(reports[0].ops) if reports else []
    for rule in rules_used:
        changed.extend(p for p in getattr(rewritten_model(model, rule), "rewritten_layers", []) if p not in changed)
    return changed


def _scores_at(job: Job) -> np.ndarray:
    """``[B, K]`` float32 scores of the job's resolved target at its clean rows: read from the score
    vectors when the columns index the model's own (one batched forward pass, or none when
    resolving computed them), else one batched forward pass of the target with its payload (in a
    space the model runs on every model input, ``job.held``)."""
    selection = job.selection
    columns = np.asarray(selection.columns, np.int64)
    if selection.target.score_vector:
        vectors = selection.vectors
        if vectors is None:
            at = job.rows if job.space is None else list(job.held)
            vectors = all_scores(job.model, at, score=job.score, batch_size=job.batch_size)
        return np.take_along_axis(np.asarray(vectors, np.float32), columns, axis=1)
    return run(_clean_scores, job.with_(options={}))["attributions"]


def target_scores(
    model: keras.Model, inputs: Any, selection: Any, *, score: str = "logits", batch_size: int = 32
) -> np.ndarray:
    """Scores ``[B, K]`` (float32) of a resolved target (``saliency_kit.targets.Resolved``, e.g.
    from ``saliency_kit.pipeline.api.resolve_selection``) at ``inputs`` ``[B, ...]``, row b scored with
    row b of the payload: batched and compiled like :func:`run` (new payloads do not recompile).
    For perturbed copies of inputs, pass ``selection.take(rows)``."""
    inputs = check_inputs(model, inputs)
    columns = np.asarray(selection.columns, np.int64)
    if len(columns) != len(inputs):
        raise ValueError(f"the target must have one row per input ({len(inputs)}); received {len(columns)} rows.")
    fresh = copy.copy(selection)
    fresh.vectors = None  # scored at these inputs, not at the ones it was resolved on
    return _scores_at(Job(model, inputs, fresh, score=score, batch_size=batch_size))


def _clean_scores(ctx: Any) -> dict:  # the backend's Context
    scores = ctx.scores(ctx.inputs)
    return {"attributions": scores, "scores": scores}


def _jacobian_rows(ctx: Any, rule: Any) -> Any:  # the backend's Context
    return ctx.gradients(ctx.inputs, rule=rule)


def gradients(
    model: keras.Model, inputs: Any, selection: Any, *, rule: Any = None, score: str = "logits", batch_size: int = 32
) -> np.ndarray:
    """``[B, K, *inputs.shape[1:]]``: ∂s_k/∂x for the resolved target ``selection`` (class
    columns int ``[B, K]`` with their target), through ``sk.rewrite(model, rule)`` when ``rule`` is given."""
    job = Job(model, inputs, selection, {"rule": rule}, score=score, batch_size=batch_size)
    return run(_jacobian_rows, job)["attributions"]
