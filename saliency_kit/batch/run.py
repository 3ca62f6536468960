"""Explaining folders of images: the run loop and its pools of decoders and writers.

``saliency batch INPUT_DIR --out DIR`` plans with :func:`.plan.plan_run` (images found and sharded
by :mod:`.discovery`), records its settings with :func:`.plan.check_settings`, then calls
:func:`run`, which reports through :class:`.progress.Progress`. Data flows one way::

    files --(thread pool: decode + preprocess, a few batches ahead)--> inputs
          --(main thread: targets once per batch, then each method; one compiled function reused)--> maps
          --(worker pool: colour, encode, atomic write)--> PNG / NPZ files
          --(main thread: one append + fsync per batch)--> manifest.jsonl

so the engine never waits on the disk, and at most a few batches are in memory at once.

Crash safety. Every file is written to a hidden ``.NAME.*.partial`` file and renamed into place, so
a killed run leaves no half-written output. The manifest is the record of what is complete: all
lines of one image are appended with a single ``write`` and flushed with ``fsync`` only after the
image's files are in place, and each line carries ``outputs`` (how many lines that image has). On
``--resume`` an image is complete when all its lines are there and all its files exist and are
not empty; anything else (a truncated last line, an image cut short) is simply redone, and
leftover ``.partial`` files of the images being redone are deleted.

The output files themselves are not fsynced one by one (that doubled the time per image here);
a killed process loses nothing, since the operating system still writes them out. After a power
cut, the files of the last seconds may be empty although listed: ``--resume`` redoes those.

Settings. ``settings.json`` in --out records what the run computes (the model's fingerprint, the
methods and their options, targets, format, rendering); a later run into the same --out (a
resume, another shard) with other settings, or after the model file, its weights or its config
changed, is refused instead of mixing two kinds of results. Shards starting at the same moment
take a lock on the folder while they check and write it.
"""

from __future__ import annotations

import concurrent.futures as futures
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import numpy as np

from .. import render
from ..files import png_bytes, remove_partials
from ..images import ImageLoadError, load_image
from ..targets.tasks import TaskPlan, task_targets
from . import outputs as out_files
from .discovery import image_key
from .outputs import one_line
from .plan import Plan
from .progress import Progress

__all__ = [
    "BatchRun",
    "Decoded",
    "Recipe",
    "Summary",
    "TaskAsker",
    "explain_asked",
    "explained_items",
    "finish_batch",
    "run",
    "write_batch",
]


#: Batches being decoded ahead of the model.
PREFETCH = 2


@dataclasses.dataclass
class Summary:
    total: int = 0  # images in this shard
    skipped: int = 0  # already complete (--resume)
    explained: int = 0
    files: int = 0
    failures: list = dataclasses.field(default_factory=list)  # (relative path, message)
    seconds: float = 0.0  # the processing loop, model loading excluded


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What every image of a batch run gets, locally or on Ray (plain data: Ray sends it to each
    actor as it is).

    ``task``: what each image asks (classes, regions, boxes, components; see :class:`TaskAsker`);
    ``methods``: ``(name, options)`` pairs; ``looks``: method -> ``outputs.Look``; ``batch_size``:
    images per forward pass (and per batch of the local run); ``formats``: ``("png",)``,
    ``("npz",)`` or both (``outputs.FORMATS``)."""

    task: TaskPlan
    methods: tuple[tuple[str, dict], ...]
    looks: dict
    batch_size: int
    formats: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class BatchRun:
    """What a batch run is, locally (:func:`run`) or on Ray (:func:`saliency_kit.batch.ray.run`):
    the images of ``plan`` (:func:`.plan.plan_run`; paths relative to ``input_dir``) explained as
    ``recipe`` says, their outputs and manifest lines written into ``out_dir``. Images of more
    than ``max_pixels`` pixels are refused (default: Pillow's limit; see :func:`.images.read_rgb`)."""

    input_dir: str
    out_dir: str
    plan: Plan
    recipe: Recipe
    max_pixels: int | None = None


@dataclasses.dataclass
class Decoded:
    """One batch's files as read: ``paths`` (relative to INPUT_DIR) of the readable ones, their
    ``inputs`` (preprocessed for the model, each ``[H, W, C]``) and ``originals`` (the files'
    pixels, ``[h, w, 3]``); ``failed``: ``(path, one-line error)`` of the others."""

    paths: list[str] = dataclasses.field(default_factory=list)
    inputs: list[np.ndarray] = dataclasses.field(default_factory=list)
    originals: list[np.ndarray] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def add(self, path: str, item: np.ndarray, original: np.ndarray) -> None:
        self.paths.append(path)
        self.inputs.append(item)
        self.originals.append(original)


class TaskAsker:
    """``ask(inputs, sizes) -> (subjects per image, targets)`` for :func:`explain_asked`: each
    batch's targets for a task plan (:func:`saliency_kit.targets.task_targets`: one forward pass
    in the engine, only when the plan needs one), the images that ask nothing left out. The local
    run and each Ray actor build one from the same plan (plain data: Ray sends it to the actors)."""

    def __init__(self, model: Any, plan: TaskPlan, spec: Any, batch_size: int):
        self.model, self.plan, self.spec, self.batch_size = model, plan, spec, batch_size

    def __call__(self, inputs: np.ndarray, sizes: Sequence[tuple[int, int]]) -> tuple[list, Any]:
        found = task_targets(
            self.model, inputs, self.plan, self.spec, image_sizes=sizes, batch_size=self.batch_size, with_outputs=False
        )
        return found.subjects, found.targets


def explain_asked(
    model: Any,
    inputs: np.ndarray,
    methods: Sequence[tuple[str, dict]],
    ask: Callable,
    batch_size: int,
    paths: Sequence[str],
    sizes: Sequence[tuple[int, int]],
) -> tuple[list, list]:
    """For any task: ``ask(inputs, sizes)`` (a :class:`TaskAsker`) gives each image's subjects
    (classes, regions, boxes, components; :class:`saliency_kit.targets.Subject`) and ``targets``
    for the images that ask something, which alone are explained. Returns ``(explanations,
    asked)`` with ``asked[row] = (row in the explanations or None, subjects)``."""
    from ..pipeline.api import explain

    per_row, targets = ask(inputs, sizes)
    rows = [row for row, questions in enumerate(per_row) if questions]
    asked = [(rows.index(row) if questions else None, questions) for row, questions in enumerate(per_row)]
    if not rows:
        return [], asked
    keys = [image_key(paths[row]) for row in rows]
    explanations = [
        explain(model, inputs[rows], name, targets, batch_size=batch_size, input_keys=keys, **options)
        for name, options in methods
    ]
    return explanations, asked


def run(
    batch: BatchRun,
    model: Any,
    spec: Any,
    *,
    decode_workers: int = 2,
    write_processes: int = 2,
    progress_stream: IO[str] | None = None,
) -> Summary:
    """Explain every image of ``batch.plan.todo`` on ``model`` (``spec``: its ``ModelSpec``) as
    ``batch.recipe`` says; write outputs and manifest lines.

    Each batch's targets are found once by a :class:`TaskAsker` (one forward pass at most, shared
    by every method). Unreadable files are recorded and skipped; lines already in the manifest are
    not written again.

    Images are decoded by ``decode_workers`` threads; maps are rendered and written by
    ``write_processes`` worker processes, one batch per job. Processes, because rendering in
    threads competes with the engine's Python code for the GIL (on the 2-core machine where this
    was measured, writer threads slowed ``explain`` by ~40%). Runs of fewer than four batches,
    or ``write_processes=0``, write from threads instead: starting processes would cost more.
    """
    plan, recipe = batch.plan, batch.recipe
    todo = plan.todo
    summary = Summary(total=len(plan.mine), skipped=len(plan.mine) - len(todo))
    for path in todo:  # a killed run may have left temporary files behind
        remove_partials(os.path.join(batch.out_dir, plan.folders[path]))
    chunks = [todo[i : i + recipe.batch_size] for i in range(0, len(todo), recipe.batch_size)]
    progress = Progress(len(todo), stream=progress_stream)
    start = time.monotonic()
    ask = TaskAsker(model, recipe.task, spec, recipe.batch_size)
    writers = _writer_pool(write_processes if len(chunks) >= 4 else 0)
    with futures.ThreadPoolExecutor(decode_workers, thread_name_prefix="decode") as decoders, writers:
        pending_write: list = []  # (write job of a batch, that batch's unreadable files)
        for decoded in _decoded_batches(decoders, batch.input_dir, spec, chunks, batch.max_pixels):
            items = explained_items(model, ask, recipe, plan.folders, decoded)
            job = _write_job(writers, batch.out_dir, items, spec, recipe.formats) if items else None
            pending_write.append((job, decoded.failed))
            del decoded, items  # not kept while the next batch is decoded
            # Record the previous batch while this one is being written.
            if len(pending_write) > 1:
                finish_batch(pending_write.pop(0), plan, summary, progress)
        while pending_write:
            finish_batch(pending_write.pop(0), plan, summary, progress)
    progress.close()
    summary.seconds = time.monotonic() - start
    return summary


def _write_job(
    writers: futures.Executor, out_dir: str, items: list, spec: Any, formats: Sequence[str]
) -> futures.Future:
    """:func:`write_batch` of one batch's ``items`` on the ``writers`` pool."""
    return writers.submit(write_batch, out_dir, items, spec.class_names, formats, tuple(spec.input_size))


def _decoded_batches(
    decoders: futures.Executor,
    input_dir: str,
    spec: Any,
    chunks: Sequence[Sequence[str]],
    max_pixels: int | None = None,
) -> Iterator[Decoded]:
    """Each chunk of image paths (relative to ``input_dir``) decoded and preprocessed for the model
    of ``spec`` by the ``decoders`` pool, :data:`PREFETCH` batches ahead of the caller; images of
    more than ``max_pixels`` pixels are refused."""

    def submit(chunk: Sequence[str]) -> list[futures.Future]:
        return [
            decoders.submit(load_image, os.path.join(input_dir, path), spec, max_pixels=max_pixels) for path in chunk
        ]

    pending = [submit(chunk) for chunk in chunks[:PREFETCH]]
    for index, chunk in enumerate(chunks):
        decoding = pending.pop(0)
        if index + PREFETCH < len(chunks):
            pending.append(submit(chunks[index + PREFETCH]))
        yield _decoded(chunk, decoding)


def _decoded(chunk: Sequence[str], decoding: Sequence[futures.Future]) -> Decoded:
    """One batch's decoded files: an unreadable file is reported in ``failed`` as ``(path, one
    line)``, not fatal."""
    decoded = Decoded()
    for path, future in zip(chunk, decoding):
        try:
            item, original = future.result()
        except ImageLoadError as error:
            decoded.failed.append((path, one_line(error)))
            continue
        decoded.add(path, item, original)
    return decoded


def explained_items(model: Any, ask: TaskAsker, recipe: Recipe, folders: dict[str, str], decoded: Decoded) -> list:
    """One batch explained (the local loop's and each Ray actor's step): ``(path, folder,
    original, outputs)`` per readable image of ``decoded``, ``folders[path]`` its output folder
    (relative to --out): the write job's items (see :func:`write_batch`). An image that asks
    nothing has no outputs."""
    if not decoded.paths:
        return []
    sizes = [original.shape[:2] for original in decoded.originals]
    explanations, asked = explain_asked(
        model, np.stack(decoded.inputs), recipe.methods, ask, recipe.batch_size, decoded.paths, sizes
    )
    return [
        (
            path,
            folders[path],
            decoded.originals[row],
            []
            if at is None
            else out_files.per_image(explanations, at, recipe.looks, "npz" in recipe.formats, subjects=questions),
        )
        for row, (path, (at, questions)) in enumerate(zip(decoded.paths, asked))
    ]


def _writer_pool(processes: int) -> futures.Executor:
    if processes <= 0:
        return futures.ThreadPoolExecutor(2, thread_name_prefix="write")

    # "spawn": fresh interpreters that never touch TensorFlow (forking a process that runs it is
    # unsafe), children of this process so that they can notice when it is gone.
    pool = futures.ProcessPoolExecutor(
        processes, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start, initargs=(os.getpid(),)
    )
    for _ in range(processes):  # start the workers now, while the model compiles
        pool.submit(_warm_up)
    return pool


def _worker_start(parent: int) -> None:
    """In each writer process: leave Ctrl-C to the parent, and exit as soon as the parent is gone
    (e.g. killed with SIGKILL) instead of lingering as an orphan. (Not run at a lower priority:
    on a busy machine the writers then starve and the engine waits for them.)"""

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.25)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _warm_up() -> None:
    render.heatmap(np.zeros((2, 2)))  # imports matplotlib's colormaps and Pillow in the worker
    png_bytes(np.zeros((2, 2, 3), np.uint8))


def write_batch(
    out_dir: str,
    items: Sequence[tuple],
    class_names: Sequence[str] | None,
    formats: Sequence[str],
    input_size: tuple[int, int] | None = None,
) -> list[tuple[str, list | str]]:
    """Worker job: write the outputs of a batch's images -> ``[(image, outputs or error message)]``;
    boxes are drawn from the pixels of ``input_size``, the model's input."""
    done: list[tuple[str, list | str]] = []
    for path, folder, original, results in items:
        try:
            done.append(
                (
                    path,
                    out_files.write_image_outputs(
                        out_dir, folder, original, results, class_names, formats, durable=False, input_size=input_size
                    ),
                )
            )
        except OSError as error:  # e.g. disk full, permission denied: report the image, keep going
            done.append((path, one_line(error)))
    return done


def finish_batch(batch: tuple, plan: Plan, summary: Summary, progress: Progress) -> None:
    """Wait for one batch's files, then record them (and its failures) in the manifest."""
    job, failed = batch
    records, done = [], 0
    failed = list(failed)
    for path, written in job.result() if job is not None else []:
        if isinstance(written, str):
            failed.append((path, written))
            continue
        done += 1
        summary.files += len(written)
        if not written and (path, None) not in plan.recorded:  # asked nothing: complete, no files
            records.append(out_files.nothing_line(path))
        records += [
            line for line in out_files.manifest_lines(path, written) if (path, line["file"]) not in plan.recorded
        ]  # redoing an image cut short: old lines stay
    for path, message in failed:
        if (path, message) not in plan.recorded:  # a resumed run does not repeat old news
            records.append(out_files.failure_line(path, message))
    plan.manifest.append(records)
    summary.explained += done
    summary.failures.extend(failed)
    progress.update(done, len(failed))
