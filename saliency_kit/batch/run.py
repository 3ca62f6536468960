"""Explaining folders of images: discovery, shards, the run's settings and resume, progress, workers.

``saliency batch INPUT_DIR --out DIR`` plans with :func:`plan_run`, records its settings with
:func:`check_settings`, then calls :func:`run`. Data flows one way::

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
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from . import outputs as out_files
from ..files import remove_partials, write_json
from ..images import ImageLoadError

#: File extensions treated as images (lower case). Anything else under INPUT_DIR is ignored.
IMAGE_EXTENSIONS = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm"}
)
SETTINGS = "settings.json"


class RunRefused(ValueError):
    """--out holds something this run must not overwrite or mix with; the message says what to do."""


# -------------------------------------------------------------------------------- discovery
def discover_images(root: str, *, exclude: Sequence[str] = ()) -> list[str]:
    """Relative POSIX paths of every image file under ``root`` (recursive, sorted, no hidden entries).

    Directories in ``exclude`` (e.g. an output folder inside ``root``) are not entered.
    """
    root = os.path.abspath(root)
    excluded = {os.path.realpath(path) for path in exclude}
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(
            d for d in subdirs
            if not d.startswith(".") and os.path.realpath(os.path.join(directory, d)) not in excluded
        )
        for name in files:
            if not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
                found.append(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    return sorted(found)


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``; raises ValueError with the expected form."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or int(match[2]) < 1 or int(match[1]) >= int(match[2]):
        raise ValueError(f"--shard expects I/N with 0 <= I < N, e.g. 0/4 ... 3/4; received {text!r}.")
    return int(match[1]), int(match[2])


def shard_of(relative_path: str, count: int) -> int:
    """The shard (0..count-1) a file belongs to: a hash of its relative path, so the split is the
    same on every machine, disjoint, covers every file, and does not move when files are added."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def image_key(relative_path: str) -> int:
    """The noise key of an image (``sk.explain(..., input_keys=)``): a 31-bit hash of its path
    relative to INPUT_DIR, so its seeded noise (SmoothGrad, ...) is the same whichever batch,
    shard or worker explains it."""
    digest = hashlib.blake2b(relative_path.encode("utf-8"), digest_size=4, person=b"saliency-noise").digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def select_shard(relative_paths: Iterable[str], index: int, count: int) -> list[str]:
    return [path for path in relative_paths if shard_of(path, count) == index]


# ------------------------------------------------------------------------------- the plan
@dataclasses.dataclass
class Plan:
    """What a batch run will do, known before any model is loaded."""

    everything: list[str]  # every image under INPUT_DIR (relative paths)
    mine: list[str]  # this shard's images
    folders: dict[str, str]  # image -> output folder (relative to --out)
    manifest: out_files.Manifest
    skip: set[str]  # complete from an earlier run (--resume)
    recorded: set[tuple[str, str]]  # manifest keys already written (see outputs.recorded_keys)
    failed_before: dict[str, str]  # image -> error, of earlier failure lines of images to redo

    @property
    def todo(self) -> list[str]:
        return [path for path in self.mine if path not in self.skip]


def plan_run(input_dir: str, out_dir: str, *, shard: tuple[int, int] | None, resume: bool) -> Plan:
    """Discover, shard, and read an earlier run's manifest. Without ``resume``, an --out holding
    an earlier run of these images raises :class:`RunRefused`. ``FileNotFoundError`` when there is
    nothing to explain."""
    everything = discover_images(input_dir, exclude=[out_dir])
    if not everything:
        raise FileNotFoundError(f"no images under {input_dir!r} (looked for "
                                f"{', '.join(sorted(IMAGE_EXTENSIONS))})")
    folders = out_files.output_dirs(everything)
    mine = select_shard(everything, *shard) if shard else everything
    manifest = out_files.Manifest(os.path.join(out_dir, out_files.manifest_name(shard)))
    records = manifest.read()
    if not resume:
        existing = [p for p in mine if os.path.isdir(os.path.join(out_dir, folders[p]))]
        if os.path.exists(manifest.path) or existing:
            what = os.path.basename(manifest.path) if os.path.exists(manifest.path) else \
                f"{len(existing)} output folder(s) such as {folders[existing[0]]!r}"
            raise RunRefused(f"--out {out_dir!r} already holds an earlier run ({what}); add --resume "
                             f"to continue it, or choose another --out")
    skip = out_files.complete_images(records, out_dir) & set(mine) if resume else set()
    failed = {r["image"]: r.get("error", "") for r in records if r.get("status") == "failed"}
    return Plan(everything, mine, folders, manifest, skip, out_files.recorded_keys(records),
                {p: e for p, e in failed.items() if p in set(mine) - skip})


def still_unreadable(input_dir: str, paths: Sequence[str]) -> dict[str, str]:
    """Of ``paths``, those that still cannot be read as images -> the reason (no model needed):
    a resume whose only work left is files that failed before can finish without the model."""
    from ..images import read_rgb

    bad = {}
    for path in paths:
        try:
            read_rgb(os.path.join(input_dir, path))
        except ImageLoadError as error:
            bad[path] = one_line(error)
    return bad


# ------------------------------------------------------------------------------- settings
def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's contents (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_fingerprint(model: str, weights: str | None) -> dict:
    """What identifies the model a run uses, whatever path it was given by: the contents of the
    model file, its sidecar or named config, its class names, and a weights file. Reads files
    only (no TensorFlow). ``ValueError``/``FileNotFoundError`` as :func:`saliency_kit.zoo.get_spec`."""
    from .. import zoo

    path = os.fspath(model)
    fingerprint: dict = {}
    if path.lower().endswith(zoo.MODEL_SUFFIXES):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model file {path} does not exist")
        fingerprint["model_file"] = file_digest(path)
        sidecar = path + ".toml"
        fingerprint["config"] = file_digest(sidecar) if os.path.isfile(sidecar) else None
    else:
        spec = zoo.get_spec(path)
        fingerprint["name"] = spec.name
        fingerprint["config"] = file_digest(spec.source)
        if spec.model_file:
            with zoo.resolved_file(spec.model_file, spec.source) as file:
                fingerprint["model_file"] = file_digest(file)
        if spec.class_names is not None:
            fingerprint["classes"] = hashlib.sha256("\n".join(spec.class_names).encode()).hexdigest()
    if weights is None or weights in ("imagenet", "random"):
        fingerprint["weights"] = weights
    elif os.path.isfile(weights):
        fingerprint["weights"] = {"file": file_digest(weights)}
    else:
        raise FileNotFoundError(f"weights file {weights} does not exist (--weights accepts 'imagenet', "
                                f"'random' or the path of a weights file)")
    return fingerprint


@contextlib.contextmanager
def locked(directory: str):
    """An exclusive lock on ``directory`` (``flock`` on the folder itself: no lock file is left)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_settings(out_dir: str, settings: dict) -> None:
    """Record ``settings`` in ``out_dir/settings.json``, or check they equal those recorded there.

    Other settings raise :class:`RunRefused` naming what differs. The check and the write hold a
    lock on ``out_dir``, so shards started at the same moment agree on one file."""
    settings = json.loads(json.dumps(settings))  # the form it has once read back
    path = os.path.join(out_dir, SETTINGS)
    os.makedirs(out_dir, exist_ok=True)
    with locked(out_dir):
        before = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                try:
                    before = json.load(handle)
                except ValueError:
                    before = None  # cut off by a crash before it was renamed into place: rewrite
        if before is not None:
            if before != settings:
                changed = ", ".join(k for k in settings if before.get(k) != settings[k]) or "settings"
                what = ("the model file, its weights or its config changed since"
                        if changed == "model" else f"{changed} differ")
                raise RunRefused(f"--out {out_dir!r} holds results made with other settings ({what}; see "
                                 f"{path}); use the same options, or another --out")
            return
        write_json(settings, path)


# -------------------------------------------------------------------------------- progress
class Progress:
    """tqdm's bar on a terminal; otherwise a plain line at most every ``every`` seconds."""

    def __init__(self, total: int, *, stream=None, every: float = 10.0):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream or sys.stderr
        self.every = every
        self.start = self.last = time.monotonic()
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            try:
                width = os.get_terminal_size(self.stream.fileno()).columns
            except (OSError, ValueError, AttributeError):
                width = 0
            # A terminal that reports no width (e.g. a pty without a size) would get an empty bar.
            size = {"dynamic_ncols": True} if width > 0 else {"ncols": 100}
            self.bar = tqdm(total=total, unit="img", file=self.stream, desc="saliency batch", **size)

    def update(self, done: int, failed: int) -> None:
        self.done += done
        self.failed += failed
        if self.bar is not None:
            self.bar.update(done + failed)
            self.bar.set_postfix(failed=self.failed, refresh=False)
            return
        now = time.monotonic()
        if now - self.last >= self.every or self.done + self.failed >= self.total:
            self.last = now
            count = self.done + self.failed
            rate = count / max(now - self.start, 1e-9)
            eta = (self.total - count) / rate if rate > 0 else float("inf")
            print(f"saliency batch: {count}/{self.total} images ({100 * count / max(self.total, 1):.0f}%), "
                  f"{rate:.1f} images/s, {self.failed} failed, eta {_duration(eta)}",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# -------------------------------------------------------------------------------- the run
@dataclasses.dataclass
class Summary:
    total: int = 0  # images in this shard
    skipped: int = 0  # already complete (--resume)
    explained: int = 0
    files: int = 0
    failures: list = dataclasses.field(default_factory=list)  # (relative path, message)
    seconds: float = 0.0  # the processing loop, model loading excluded


def explain_batch(model, inputs: np.ndarray, methods: Sequence[tuple[str, dict]], targets_for: Callable,
                  batch_size: int, paths: Sequence[str]) -> list:
    """One Explanation per method for ``inputs`` (the images ``paths``, relative to INPUT_DIR);
    the targets are resolved once for all methods; seeded noise is keyed by each path."""
    import saliency_kit as sk

    targets = targets_for(inputs)
    keys = [image_key(path) for path in paths]
    return [sk.explain(model, inputs, name, targets, batch_size=batch_size, input_keys=keys, **options)
            for name, options in methods]


def explain_asked(model, inputs: np.ndarray, methods: Sequence[tuple[str, dict]], ask: Callable, batch_size: int,
                  paths: Sequence[str], sizes: Sequence[tuple[int, int]]) -> tuple[list, list]:
    """For a segmentation model, a detector or an output head: ``ask(inputs, sizes)`` gives each
    image's questions (regions, boxes; see :mod:`saliency_kit.cli.tasks`) and ``targets`` for
    the images that ask something, which alone are explained. Returns ``(explanations, asked)``
    with ``asked[row] = (row in the explanations or None, questions)``."""
    import saliency_kit as sk

    per_row, targets = ask(inputs, sizes)
    rows = [row for row, questions in enumerate(per_row) if questions]
    asked = [(rows.index(row) if questions else None, questions) for row, questions in enumerate(per_row)]
    if not rows:
        return [], asked
    keys = [image_key(paths[row]) for row in rows]
    explanations = [sk.explain(model, inputs[rows], name, targets, batch_size=batch_size, input_keys=keys,
                               **options) for name, options in methods]
    return explanations, asked


def run(
    *,
    input_dir: str,
    out_dir: str,
    plan: Plan,
    model,
    spec,
    methods: Sequence[tuple[str, dict]],
    targets_for: Callable,
    looks: dict,
    batch_size: int,
    formats: Sequence[str],
    decode_workers: int = 2,
    write_processes: int = 2,
    progress_stream=None,
) -> Summary:
    """Explain every image of ``plan.todo``; write outputs and manifest lines.

    ``methods``: ``(name, options)`` pairs. ``targets_for(inputs)`` returns int ``[B, K]`` for a
    batch (one forward pass at most, shared by every method); or, when it has a true
    ``asks_questions`` attribute, it is the ``ask`` of :func:`explain_asked` (regions, boxes). ``looks``: method -> ``outputs.Look``.
    Unreadable files are recorded and skipped; lines already in the manifest are not written again.

    Images are decoded by ``decode_workers`` threads; maps are rendered and written by
    ``write_processes`` worker processes, one batch per job. Processes, because rendering in
    threads competes with the engine's Python code for the GIL (on the 2-core machine where this
    was measured, writer threads slowed ``explain`` by ~40%). Runs of fewer than four batches,
    or ``write_processes=0``, write from threads instead: starting processes would cost more.
    """
    from ..images import load_image

    todo = plan.todo
    summary = Summary(total=len(plan.mine), skipped=len(plan.mine) - len(todo))
    for path in todo:  # a killed run may have left temporary files behind
        remove_partials(os.path.join(out_dir, plan.folders[path]))
    chunks = [todo[i:i + batch_size] for i in range(0, len(todo), batch_size)]
    progress = Progress(len(todo), stream=progress_stream)
    start = time.monotonic()

    def decode(path: str):
        return load_image(os.path.join(input_dir, path), spec)

    writers = _writer_pool(write_processes if len(chunks) >= 4 else 0)
    with futures.ThreadPoolExecutor(decode_workers, thread_name_prefix="decode") as decoders, writers:
        prefetch = 2  # batches being decoded ahead of the model
        pending_decode = [[decoders.submit(decode, p) for p in chunk] for chunk in chunks[:prefetch]]
        pending_write: list = []  # (write job of a batch, that batch's unreadable files)

        for index, chunk in enumerate(chunks):
            decoded = pending_decode.pop(0)
            if index + prefetch < len(chunks):
                pending_decode.append([decoders.submit(decode, p) for p in chunks[index + prefetch]])
            good, inputs, originals, failed = [], [], [], []
            for path, future in zip(chunk, decoded):
                try:
                    item, original = future.result()
                except ImageLoadError as error:  # an unreadable file is reported, not fatal
                    failed.append((path, one_line(error)))
                    continue
                good.append(path)
                inputs.append(item)
                originals.append(original)

            items = []
            if good and getattr(targets_for, "asks_questions", False):
                explanations, asked = explain_asked(model, np.stack(inputs), methods, targets_for, batch_size, good,
                                                    [o.shape[:2] for o in originals])
                items = [(path, plan.folders[path], originals[row],
                          [] if at is None else out_files.per_image(explanations, at, looks, "npz" in formats,
                                                                    subjects=questions))
                         for row, (path, (at, questions)) in enumerate(zip(good, asked))]
                del explanations
            elif good:
                explanations = explain_batch(model, np.stack(inputs), methods, targets_for, batch_size, good)
                items = [(path, plan.folders[path], originals[row],
                          out_files.per_image(explanations, row, looks, "npz" in formats))
                         for row, path in enumerate(good)]
                del explanations
            job = writers.submit(_write_batch, out_dir, items, spec.class_names, formats,
                                 tuple(spec.input_size)) if items else None
            del inputs, originals, items

            # Record the previous batch while this one is being written.
            if pending_write:
                _finish(pending_write.pop(0), plan, summary, progress)
            pending_write.append((job, failed))
        while pending_write:
            _finish(pending_write.pop(0), plan, summary, progress)
    progress.close()
    summary.seconds = time.monotonic() - start
    return summary


def _writer_pool(processes: int) -> futures.Executor:
    if processes <= 0:
        return futures.ThreadPoolExecutor(2, thread_name_prefix="write")
    import multiprocessing

    # "spawn": fresh interpreters that never touch TensorFlow (forking a process that runs it is
    # unsafe), children of this process so that they can notice when it is gone.
    pool = futures.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_start, initargs=(os.getpid(),))
    for _ in range(processes):  # start the workers now, while the model compiles
        pool.submit(_warm_up)
    return pool


def _worker_start(parent: int) -> None:
    """In each writer process: leave Ctrl-C to the parent, and exit as soon as the parent is gone
    (e.g. killed with SIGKILL) instead of lingering as an orphan. (Not run at a lower priority:
    on a busy machine the writers then starve and the engine waits for them.)"""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.25)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _warm_up() -> None:
    from .. import render

    render.heatmap(np.zeros((2, 2)))  # imports matplotlib's colormaps and Pillow in the worker
    render.png_bytes(np.zeros((2, 2, 3), np.uint8))


def _write_batch(out_dir: str, items, class_names, formats, input_size=None) -> list[tuple[str, list | str]]:
    """Worker job: write the outputs of a batch's images -> ``[(image, outputs or error message)]``;
    boxes are drawn from the pixels of ``input_size``, the model's input."""
    done = []
    for path, folder, original, results in items:
        try:
            done.append((path, out_files.write_image_outputs(out_dir, folder, original, results, class_names,
                                                             formats, durable=False, input_size=input_size)))
        except OSError as error:  # e.g. disk full, permission denied: report the image, keep going
            done.append((path, one_line(error)))
    return done


def _finish(batch, plan: Plan, summary: Summary, progress: Progress) -> None:
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
        records += [line for line in out_files.manifest_lines(path, written)
                    if (path, line["file"]) not in plan.recorded]  # redoing an image cut short: old lines stay
    for path, message in failed:
        if (path, message) not in plan.recorded:  # a resumed run does not repeat old news
            records.append(out_files.failure_line(path, message))
    plan.manifest.append(records)
    summary.explained += done
    summary.failures.extend(failed)
    progress.update(done, len(failed))


def one_line(error: BaseException) -> str:
    """An exception's message on one line, at most 300 characters."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
