"""``saliency batch --ray``: the batch pipeline's outputs, computed by Ray Data actors.

    saliency batch images/ --out /shared/maps --ray              # a local Ray instance, all cores
    saliency batch images/ --out /shared/maps --ray auto --workers 8 --gpus-per-worker 1

Data flows one way, as in the local run (:mod:`saliency_kit.batch.run`)::

    driver: list files, skip complete ones (--resume), split the rest into chunks of
            --batch-images images, one Ray Data row per chunk
      --(Ray Data map_batches, an ActorPoolStrategy pool of --workers actors)-->
    actor:  load the model once (in its constructor), then per chunk: decode, explain (one
            compiled function reused), render and write each file atomically
      --(the chunk's result: its images' outputs or errors)-->
    driver: one manifest append + fsync per chunk, the progress bar

The chunks are the local run's batches (``--batch-images`` defaults to ``--batch-size``), and the
actor does exactly what the local loop does with a batch, through the same functions, so the files
and manifest lines are the local run's, byte for byte (only the order of manifest lines differs).
Seeded noise (SmoothGrad, ...) is keyed by each image's path (:func:`saliency_kit.batch.discovery.image_key`),
so an image's maps do not depend on its chunk, its position there or its worker. A resumed run keeps
the first run's chunks (without their complete images).

Crash safety. Only the driver writes the manifest, once per chunk it receives: if Ray retries a
chunk (its actor died: Ray Data restarts the actor and resubmits the chunk), the retry rewrites the
same files through the same atomic renames, and the driver records a chunk only once. A chunk
starts by deleting the ``.partial`` leftovers of its images' earlier attempts. If the driver dies,
``--resume`` redoes exactly the images whose manifest lines are missing.

Shared storage. Actors write into ``--out`` themselves, so every node running an actor must see
``--out`` (and ``INPUT_DIR``) at the same path, e.g. an NFS mount. The driver writes a probe file
into ``--out`` and refuses to start (exit 2) if a node cannot read it; an actor started later on
a new node checks it too before it writes anything.
"""

from __future__ import annotations

import concurrent.futures as futures
import dataclasses
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

import numpy as np

from .. import keras_backend
from ..files import remove_partials, write_atomic
from ..images import ImageLoadError, load_image
from ..targets.tasks import AskError
from . import outputs
from . import run as pipeline
from .outputs import one_line
from .plan import Plan
from .progress import Progress
from .ray_job import Cluster, Job, ModelSource

__all__ = [
    "Cluster",
    "ModelSource",
    "RayUnavailable",
    "OutputNotShared",
    "import_ray",
    "check_visible",
    "ChunkExplainer",
    "connect",
    "check_nodes",
    "run",
    "remove_stale_probes",
    "with_suppressed_errors",
]

#: How to get the extra that provides Ray Data (printed when it is missing).
INSTALL_HINT = 'pip install "saliency_kit[ray]"  (Ray Data from PyPI: "ray[data]")'
PROBE_PREFIX = ".saliency-ray-probe-"
#: Smallest object store Ray accepts is 75 MiB; the chunks' results are small (file names, scores).
LOCAL_OBJECT_STORE_BYTES = 128 * 2**20


class RayUnavailable(ImportError):
    """``ray[data]`` is not installed."""


class OutputNotShared(RuntimeError):
    """A Ray node cannot see ``--out`` (or ``INPUT_DIR``): its outputs would be lost."""


def import_ray() -> Any:
    """The ``ray`` module with ``ray.data`` imported, or :class:`RayUnavailable` saying how to install them."""
    try:
        import ray
        import ray.data  # noqa: F401 - the part this runner needs
    except ImportError as error:
        raise RayUnavailable(
            f"--ray needs Ray Data, which is not installed: {INSTALL_HINT}; received ImportError: {error}."
        ) from None
    return ray


def check_visible(job: Job) -> str:
    """Raise :class:`OutputNotShared` unless this process sees the driver's probe in ``--out`` and
    ``INPUT_DIR``, and :class:`~saliency_kit.keras_backend.BackendError` unless its Keras backend is
    the driver's; returns this node's name for messages."""
    node = socket.gethostname()
    here = keras_backend.selected_backend()
    if here[0].lower() != job.backend:
        raise keras_backend.BackendError(
            f"Ray node {node!r} runs Keras on {here[0]!r} (set by {here[1]}) but the driver on "
            f"{job.backend!r}: every actor must use the driver's backend; set KERAS_BACKEND={job.backend} "
            f"in the cluster's environment, or run the driver with KERAS_BACKEND={here[0]}."
        )
    probe = os.path.join(job.out_dir, job.probe)
    try:
        with open(probe, encoding="utf-8") as handle:
            seen = handle.read()
    except OSError:
        seen = None
    if seen != job.token:
        raise OutputNotShared(
            f"--out {job.out_dir!r} is not shared with Ray node {node!r}: it cannot read the probe file "
            f"{probe!r} the driver wrote there; use a folder every node mounts at the same path "
            f"(e.g. NFS); received {'no such file' if seen is None else 'another run’s probe'}."
        )
    if not os.path.isdir(job.input_dir):
        raise OutputNotShared(
            f"INPUT_DIR {job.input_dir!r} is not visible on Ray node {node!r}; use a "
            f"folder every node mounts at the same path; received no such folder."
        )
    return node


def _use_assigned_cpus(backend: str) -> None:
    """The framework's thread pools sized to the CPUs Ray gave this actor, not to the whole machine
    (actors sharing a node would otherwise each start a thread per core and compete): TensorFlow's
    intra- and inter-op pools; on JAX, with one CPU, XLA's CPU operations single-threaded
    (``XLA_FLAGS``, read when JAX first computes, so set before the model loads); PyTorch's
    intra-op threads."""
    import ray

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    if not cpus:
        return
    if backend == "jax":
        flag = "--xla_cpu_multi_thread_eigen=false"
        current = os.environ.get("XLA_FLAGS", "")
        if int(cpus) == 1 and flag not in current:
            os.environ["XLA_FLAGS"] = f"{current} {flag}".strip()
        return
    if backend == "torch":
        import torch

        torch.set_num_threads(max(1, int(cpus)))
        return
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(max(1, int(cpus)))
        tf.config.threading.set_inter_op_parallelism_threads(max(1, int(cpus)))
    except RuntimeError:  # TensorFlow already started in this process: keep its pools
        pass


class ChunkExplainer:
    """The Ray Data actor: the model loaded and the explainer compiled once, then one chunk per call.

    A call receives rows ``{"chunk": index, "images": JSON [[image, its output folder], ...]}`` and
    returns ``{"chunk": index, "results": JSON [[image, [output fields, ...] or error], ...]}`` (or
    the JSON of :meth:`results`' ``ask_error``).
    """

    def __init__(self, job: Job):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        os.environ.setdefault("MPLBACKEND", "Agg")
        check_visible(job)
        _use_assigned_cpus(job.backend)
        self.job = job
        self.model, self.spec = job.model.load()
        self.ask = pipeline.TaskAsker(self.model, job.recipe.task, self.spec, job.recipe.batch_size)

    def __call__(self, rows: dict) -> dict:
        results = [json.dumps(self.results(json.loads(images)), ensure_ascii=False) for images in rows["images"]]
        return {"chunk": np.asarray(rows["chunk"]), "results": np.asarray(results, dtype=object)}

    def results(self, chunk: Sequence[tuple[str, str]]) -> list | dict:
        """:meth:`explain_chunk`, or ``{"ask_error": [option, text, reason]}`` when a target does
        not fit an image: the driver raises that :class:`saliency_kit.targets.tasks.AskError`, the
        local run's error (as data, since Ray Data does not send an actor's exception back)."""
        try:
            return self.explain_chunk(chunk)
        except AskError as error:
            return {"ask_error": [error.option, error.text, error.reason]}

    def explain_chunk(self, chunk: Sequence[tuple[str, str]]) -> list:
        """What the local loop does with one batch (:func:`saliency_kit.batch.run.run`), through
        the same functions: ``[(image, [Output fields] or error message)]``."""
        job = self.job
        folders = dict(chunk)
        for folder in folders.values():  # an earlier attempt at this chunk may have been killed mid-write
            remove_partials(os.path.join(job.out_dir, folder))
        decoded = pipeline.Decoded()
        for path in folders:
            file = os.path.join(job.input_dir, path)
            try:
                item, original = load_image(file, self.spec, max_pixels=job.max_pixels)
            except ImageLoadError as error:  # an unreadable file is reported, not fatal
                # named as the driver names it, so that the message is the local run's
                decoded.failed.append((path, one_line(error).replace(file, os.path.join(job.input_label, path))))
                continue
            decoded.add(path, item, original)
        items = pipeline.explained_items(self.model, self.ask, job.recipe, folders, decoded)
        written = pipeline.write_batch(
            job.out_dir, items, self.spec.class_names, job.recipe.formats, tuple(self.spec.input_size)
        )
        fields = [
            (path, files if isinstance(files, str) else [dataclasses.asdict(o) for o in files])
            for path, files in written
        ]
        return decoded.failed + fields


def _decode_results(text: str) -> list:
    """A chunk's results as :func:`saliency_kit.batch.run.write_batch` returns them; the
    :class:`saliency_kit.targets.tasks.AskError` of an actor raised."""
    results = json.loads(text)
    if isinstance(results, dict):
        raise AskError(*results["ask_error"])
    return [
        (path, written if isinstance(written, str) else [outputs.Output(**o) for o in written])
        for path, written in results
    ]


def connect(address: str | None, *, num_cpus: int | None = None) -> Any:
    """Join the cluster at ``address`` (``auto``, ``ray://HOST:PORT``, ``HOST:PORT``), or start a
    local Ray instance when ``address`` is None. Returns ``(ray, started)``: whether this call
    started (and the caller must shut down) Ray. An already initialised Ray is used as it is."""

    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    quiet = {
        "include_dashboard": False,
        "logging_level": logging.ERROR,
        "log_to_driver": False,
        "configure_logging": True,
    }
    env = {
        "env_vars": {
            "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3"),
            "MPLBACKEND": "Agg",
            "KERAS_BACKEND": keras_backend.backend(),  # the actors run the driver's backend
        }
    }
    if address is None:
        # "local": a new instance even where `ray start` left a cluster (live or stale) to auto-join
        ray.init(
            address="local",
            num_cpus=num_cpus,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            runtime_env=env,
            **quiet,
        )
    else:
        quiet.pop("include_dashboard")
        ray.init(address=address, runtime_env=env, **quiet)
    return ray, True


def check_nodes(ray: Any, job: Job) -> None:
    """Run :func:`check_visible` once on every alive node; raise the first node's refusal."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    check = ray.remote(num_cpus=0, max_retries=0)(check_visible)
    pending = [
        check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(job)
        for node in ray.nodes()
        if node.get("Alive")
    ]
    for ref in pending:
        try:
            ray.get(ref)
        except Exception as error:  # noqa: BLE001 - unwrapped below
            raise _original(error) from None


def _original(error: BaseException) -> BaseException:
    """The user-code exception inside Ray's wrappers (RayTaskError, UserCodeException)."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = getattr(error, "cause", None) or error.__cause__
        if not isinstance(inner, BaseException):
            break
        error = inner
    return error


def run(
    batch: pipeline.BatchRun,
    model: ModelSource,
    cluster: Cluster | None = None,
    *,
    progress_stream: IO[str] | None = None,
) -> pipeline.Summary:
    """:func:`saliency_kit.batch.run.run` on Ray Data: the same files and manifest lines, computed
    by a pool of actors on ``cluster`` (default: a local Ray instance, one actor per CPU).

    ``model``: what each actor loads; each actor finds its images' targets for the recipe's task
    as the local run does, so every task (classes, regions, boxes, heads) runs on Ray. Raises
    :class:`OutputNotShared` if a node cannot see ``batch.out_dir``.
    """
    cluster = cluster or Cluster()
    plan = batch.plan
    todo = plan.todo
    summary = pipeline.Summary(total=len(plan.mine), skipped=len(plan.mine) - len(todo))
    if not todo:
        return summary
    size = cluster.batch_images or batch.recipe.batch_size
    chunks = [[(path, plan.folders[path]) for path in chunk] for chunk in _chunks(plan.mine, set(todo), size) if chunk]
    job = _job_with_probe(batch, model)
    try:
        ray, started = connect(cluster.address, num_cpus=cluster.num_cpus)
        try:
            check_nodes(ray, job)
            dataset = _dataset(ray, chunks, job, cluster)
            _record(dataset, plan, summary, Progress(len(todo), stream=progress_stream))
        finally:
            if started:
                ray.shutdown()
    finally:
        with_suppressed_errors(os.remove, os.path.join(job.out_dir, job.probe))
    return summary


def _job_with_probe(batch: pipeline.BatchRun, model: ModelSource) -> Job:
    """The actors' :class:`Job`, after writing its probe into --out (see :func:`check_visible`);
    the driver's stale probes are deleted first."""
    out_abs = os.path.abspath(batch.out_dir)
    os.makedirs(out_abs, exist_ok=True)
    remove_stale_probes(out_abs)
    token = f"{secrets.token_hex(16)} {socket.gethostname()} {os.getpid()}"
    probe = PROBE_PREFIX + token[:12]
    write_atomic(os.path.join(out_abs, probe), token.encode())
    return Job(
        input_dir=os.path.abspath(batch.input_dir),
        input_label=batch.input_dir,
        out_dir=out_abs,
        probe=probe,
        token=token,
        model=model,
        recipe=batch.recipe,
        max_pixels=batch.max_pixels,
        backend=keras_backend.backend(),
    )


def _record(dataset: Any, plan: Plan, summary: pipeline.Summary, progress: Progress) -> None:
    """Record each chunk's results as the actors deliver them (a chunk delivered twice, once),
    with the local run's :func:`saliency_kit.batch.run.finish_batch`; ``summary.seconds`` from
    the first."""
    start = time.monotonic()
    received = set()
    try:
        for row in dataset.iter_rows():
            index = int(row["chunk"])
            if index in received:
                continue
            received.add(index)
            written: futures.Future[list] = futures.Future()
            written.set_result(_decode_results(row["results"]))
            pipeline.finish_batch((written, []), plan, summary, progress)
    except Exception as error:  # noqa: BLE001 - the actors' own exception, unwrapped
        raise _original(error) from None
    finally:
        progress.close()
    summary.seconds = time.monotonic() - start


def _chunks(mine: Sequence[str], todo: set, size: int) -> list[list[str]]:
    """The images of ``todo`` in the chunks a fresh run makes of ``mine`` (``size`` images each).

    A chunk is recorded whole (one manifest append), so a resumed run redoes whole chunks of the
    first run, each image at its first position.
    """
    return [[path for path in mine[i : i + size] if path in todo] for i in range(0, len(mine), size)]


def remove_stale_probes(out_dir: str) -> None:
    """Delete the probe files of drivers on this machine that are gone (killed before their cleanup)."""
    host = socket.gethostname()
    for name in os.listdir(out_dir):
        if not name.startswith(PROBE_PREFIX):
            continue
        path = os.path.join(out_dir, name)
        try:
            with open(path, encoding="utf-8") as handle:
                _, probe_host, pid = handle.read().split()
            os.kill(int(pid), 0) if probe_host == host else None
        except ProcessLookupError:
            with_suppressed_errors(os.remove, path)
        except (OSError, ValueError):  # unreadable, or a live process of another user: leave it
            pass


def with_suppressed_errors(function: Callable[..., Any], *args: Any) -> None:
    try:
        function(*args)
    except OSError:
        pass


def _default_workers(ray: Any, gpus_per_worker: float) -> int:
    resources = ray.cluster_resources()
    if gpus_per_worker:
        return max(1, int(resources.get("GPU", 0) // gpus_per_worker))
    return max(1, int(resources.get("CPU", 1)))


def _dataset(ray: Any, chunks: list, job: Job, cluster: Cluster) -> Any:
    """The Ray Data pipeline: one row per chunk, mapped by a pool of :class:`ChunkExplainer` actors."""
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # only the project's lines on stderr
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the driver shows its own
    context.print_on_execution_start = False
    rows = [{"chunk": i, "images": json.dumps(chunk, ensure_ascii=False)} for i, chunk in enumerate(chunks)]
    # One chunk per block, so that one task is one chunk: a retry redoes only the chunk that failed.
    dataset = ray.data.from_items(rows, override_num_blocks=len(rows))
    return dataset.map_batches(
        ChunkExplainer,
        fn_constructor_kwargs={"job": job},
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=cluster.workers or _default_workers(ray, cluster.gpus_per_worker)),
        num_cpus=1,
        num_gpus=cluster.gpus_per_worker or None,
    )
