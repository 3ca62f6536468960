"""Explaining folders of images: discovery, sharding, output names, the manifest, and the pipeline.

``saliency batch INPUT_DIR --out DIR`` runs :func:`run`. Data flows one way::

    files --(thread pool: decode + preprocess, a few batches ahead)--> inputs
          --(main thread: sk.explain, one compiled function reused)--> Explanation
          --(thread pool: colour, encode, atomic write)--> PNG / NPZ files
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
"""
from __future__ import annotations

import concurrent.futures as futures
import dataclasses
import hashlib
import io
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence

import numpy as np

from . import render

#: File extensions treated as images (lower case). Anything else under INPUT_DIR is ignored.
IMAGE_EXTENSIONS = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pnm"}
)
MANIFEST = "manifest.jsonl"
PNG_KINDS = ("heatmap", "overlay")


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
        raise ValueError(f"--shard expects I/N with 0 <= I < N, e.g. 0/4 ... 3/4; got {text!r}")
    return int(match[1]), int(match[2])


def shard_of(relative_path: str, count: int) -> int:
    """The shard (0..count-1) a file belongs to: a hash of its relative path, so the split is the
    same on every machine, disjoint, covers every file, and does not move when files are added."""
    digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def select_shard(relative_paths: Iterable[str], index: int, count: int) -> list[str]:
    return [path for path in relative_paths if shard_of(path, count) == index]


# ------------------------------------------------------------------------------ output names
def safe_name(text: str, limit: int = 60) -> str:
    """A file-name-safe version of a name: letters (any script), digits and ``. _ + -``; others -> ``_``."""
    cleaned = re.sub(r"[^\w.+-]+", "_", str(text)).strip("._-")
    return cleaned[:limit] or "x"


def output_dirs(relative_paths: Sequence[str]) -> dict[str, str]:
    """Map each input (relative path) to its own output folder (relative to --out).

    The folder mirrors the input's path without its extension (``cats/tom.jpg`` -> ``cats/tom``);
    inputs that would share a folder keep their extension in it (``tom.jpg``, ``tom.png`` ->
    ``tom_jpg``, ``tom_png``), and if that is not enough (names equal once made file-name-safe) a
    short hash of the path. Computed from the full, unsharded listing, so every shard agrees.
    """
    def folder(path: str, level: int) -> str:
        stem, ext = os.path.splitext(path)
        parts = [safe_name(part, limit=120) for part in stem.split("/")]
        if level >= 1:
            parts[-1] += "_" + safe_name(ext.lstrip("."), limit=10)
        if level >= 2:
            parts[-1] += "_" + hashlib.sha256(path.encode("utf-8")).hexdigest()[:8]
        return "/".join(parts)

    result = {}
    for level in range(3):
        candidates = {path: folder(path, level) for path in relative_paths if path not in result}
        counts: dict[str, int] = {}
        for name in candidates.values():
            counts[name] = counts.get(name, 0) + 1
        taken = set(result.values())
        for path, name in candidates.items():
            if counts[name] == 1 and name not in taken or level == 2:
                result[path] = name
    return result


def output_name(method: str, target: int, class_name: str, kind: str) -> str:
    """``guided_backprop-c0-circle-heatmap.png`` / ``...-overlay.png`` / ``guided_backprop-c0-circle.npz``."""
    base = f"{safe_name(method)}-c{int(target)}-{safe_name(class_name)}"
    return f"{base}.npz" if kind == "npz" else f"{base}-{kind}.png"


def inside(root: str, path: str) -> bool:
    """Whether ``path`` (after resolving symlinks and ``..``) lies inside ``root``."""
    root = os.path.realpath(root)
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def class_name_of(class_names, index: int) -> str:
    if class_names is not None and 0 <= index < len(class_names):
        return str(class_names[index])
    return str(index)


@dataclasses.dataclass
class Output:
    """One written file: the manifest line for it (without ``image``/``outputs``) and its path."""

    method: str
    target: int
    class_name: str
    score: float
    kind: str
    file: str  # relative to the output root


def write_image_outputs(
    out_root: str,
    folder: str,
    original: np.ndarray,
    per_method: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]],
    class_names,
    formats: Sequence[str],
    *,
    durable: bool = True,
) -> list[Output]:
    """Render and atomically write the outputs of one image.

    ``per_method``: ``(method, maps [K, H, W], targets [K], scores [K], attributions [K, ...] or
    None)`` for each method. A class requested twice (``top1`` and its name) is written once.
    ``durable``: fsync each file before its rename (see :func:`saliency_kit.render.atomic_path`).
    """
    written: list[Output] = []
    seen = set()
    kinds = (PNG_KINDS if "png" in formats else ()) + (("npz",) if "npz" in formats else ())
    for method, maps, targets, scores, attributions in per_method:
        for k, target in enumerate(np.asarray(targets).tolist()):
            if (method, target) in seen:
                continue
            seen.add((method, target))
            name = class_name_of(class_names, target)
            score = float(scores[k])
            for kind in kinds:
                file = output_name(method, target, name, kind)
                relative = f"{folder}/{file}" if folder else file
                path = os.path.join(out_root, relative)
                if not inside(out_root, path):
                    raise ValueError(f"refusing to write {path!r}: it resolves outside the output folder")
                if kind == "heatmap":
                    data = render.png_bytes(render.heatmap(maps[k]))
                elif kind == "overlay":
                    data = render.png_bytes(render.overlay(original, maps[k]))
                else:
                    extra = {"attributions": np.asarray(attributions[k])} if attributions is not None else {}
                    data = _npz_bytes(map=np.asarray(maps[k]), target=np.int64(target), score=np.float32(score),
                                      method=np.str_(method), class_name=np.str_(name), **extra)
                render.write_atomic(path, data, durable=durable)
                written.append(Output(method, int(target), name, score, kind, relative))
    return written


def _npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


# -------------------------------------------------------------------------------- manifest
class Manifest:
    """``manifest.jsonl``: appended whole lines only, fsynced; tolerant of a cut-off last line."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> list[dict]:
        """Every valid line (a truncated or corrupt line -- e.g. from a power cut -- is skipped)."""
        if not os.path.exists(self.path):
            return []
        records = []
        with open(self.path, "rb") as handle:
            for raw in handle:
                if not raw.endswith(b"\n"):
                    continue  # cut off mid-line
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict) and "image" in record:
                    records.append(record)
        return records

    def append(self, records: Sequence[dict]) -> None:
        """Append ``records`` with one ``write`` call, then ``fsync``.

        If the file does not end with a newline (a previous run was cut off mid-line), a newline
        is written first so that the broken line stays isolated and is skipped on reading.
        """
        if not records:
            return
        data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as handle:
                    handle.seek(size - 1)
                    if handle.read(1) != b"\n":
                        data = b"\n" + data
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)


def complete_images(records: Sequence[dict], out_root: str) -> set[str]:
    """Images whose every recorded output is present: the count of their ``ok`` lines equals the
    ``outputs`` those lines announce, and every file exists."""
    by_image: dict[str, dict[str, dict]] = {}
    for record in records:
        if record.get("status") == "ok":
            by_image.setdefault(record["image"], {})[record["file"]] = record
    complete = set()
    for image, lines in by_image.items():
        expected = {line.get("outputs") for line in lines.values()}
        if len(expected) == 1 and len(lines) == expected.pop() and all(
            _nonempty_file(os.path.join(out_root, f)) for f in lines
        ):
            complete.add(image)
    return complete


def _nonempty_file(path: str) -> bool:
    try:
        return os.stat(path).st_size > 0  # an unflushed file after a power cut can be empty
    except OSError:
        return False


def recorded_keys(records: Sequence[dict]) -> set[tuple[str, str]]:
    """``(image, file)`` of every output line and ``(image, error)`` of every failure line."""
    return {(r["image"], r.get("file") if r.get("status") == "ok" else r.get("error")) for r in records}


def manifest_name(shard: tuple[int, int] | None) -> str:
    """``manifest.jsonl``; each shard of a split run writes its own ``manifest.shard-I-of-N.jsonl``
    (shards may share --out, even on different machines); ``cat out/manifest*.jsonl`` joins them."""
    return MANIFEST if shard is None or shard[1] == 1 else f"manifest.shard-{shard[0]}-of-{shard[1]}.jsonl"


def remove_partials(directory: str) -> None:
    """Delete leftover ``.*.partial`` files of a killed run in one output folder."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(".") and name.endswith(".partial"):
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass


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


# -------------------------------------------------------------------------------- pipeline
@dataclasses.dataclass
class Summary:
    total: int = 0  # images in this shard
    skipped: int = 0  # already complete (--resume)
    explained: int = 0
    files: int = 0
    failures: list = dataclasses.field(default_factory=list)  # (relative path, message)
    seconds: float = 0.0  # the processing loop, model loading excluded


def run(
    *,
    input_dir: str,
    out_dir: str,
    relative_paths: Sequence[str],
    folders: dict[str, str],
    model,
    spec,
    methods: Sequence[tuple[str, dict]],
    targets_for,
    batch_size: int,
    formats: Sequence[str],
    manifest: Manifest,
    skip: set[str] = frozenset(),
    recorded: set[tuple[str, str]] = frozenset(),
    explain=None,
    decode_workers: int = 2,
    write_processes: int = 2,
    progress_stream=None,
) -> Summary:
    """Explain every image of ``relative_paths`` not in ``skip``; write outputs and manifest lines.

    ``methods``: ``(name, options)`` pairs. ``targets_for(inputs)`` returns the ``targets`` argument
    for a batch of inputs; ``explain(model, inputs, method, targets, batch_size, options)``, if
    given, replaces the plain call of :func:`saliency_kit.explain`. Bad files are recorded and
    skipped.
    ``recorded``: ``(image, file)`` and ``(image, error)`` pairs already in the manifest, which are
    not written again (see :func:`recorded_keys`).

    Images are decoded by ``decode_workers`` threads; maps are rendered and written by
    ``write_processes`` worker processes, one batch per job. Processes, because rendering in
    threads competes with the engine's Python code for the GIL (on the 2-core machine where this
    was measured, writer threads slowed ``explain`` by ~40%). Runs of fewer than four batches,
    or ``write_processes=0``, write from threads instead: starting processes would cost more.
    """
    from .images import load_image

    if explain is None:
        def explain(model, inputs, method, targets, batch_size, options):
            import saliency_kit as sk

            return sk.explain(model, inputs, method, targets, batch_size=batch_size, **options)

    todo = [path for path in relative_paths if path not in skip]
    summary = Summary(total=len(relative_paths), skipped=len(relative_paths) - len(todo))
    for path in todo:  # a killed run may have left temporary files behind
        remove_partials(os.path.join(out_dir, folders[path]))
    chunks = [todo[i:i + batch_size] for i in range(0, len(todo), batch_size)]
    progress = Progress(len(todo), stream=progress_stream)
    start = time.monotonic()

    def decode(path: str):
        return load_image(os.path.join(input_dir, path), spec)

    if write_processes > 0 and len(chunks) >= 4:
        import multiprocessing

        # "spawn": fresh interpreters that never touch TensorFlow (forking a process that runs it
        # is unsafe), children of this process so that they can notice when it is gone.
        writers = futures.ProcessPoolExecutor(write_processes, mp_context=multiprocessing.get_context("spawn"),
                                              initializer=_worker_start, initargs=(os.getpid(),))
        for _ in range(write_processes):  # start the workers now, while the model compiles
            writers.submit(_warm_up)
    else:
        writers = futures.ThreadPoolExecutor(2, thread_name_prefix="write")
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
                except Exception as error:  # noqa: BLE001 - any unreadable file is reported, not fatal
                    failed.append((path, _one_line(error)))
                    continue
                good.append(path)
                inputs.append(item)
                originals.append(original)

            results = []
            if good:
                batch = np.stack(inputs)
                targets = targets_for(batch)
                for name, options in methods:
                    results.append((name, explain(model, batch, name, targets, batch_size, options)))
            items = []
            for row, path in enumerate(good):
                per_method = [(name, e.maps[row], e.targets[row], e.scores[row],
                               e.attributions[row] if "npz" in formats else None) for name, e in results]
                items.append((path, folders[path], originals[row], per_method))
            job = writers.submit(_write_batch, out_dir, items, spec.class_names, formats) if items else None
            del inputs, originals, results, items

            # Record the previous batch while this one is being written.
            if pending_write:
                _finish(pending_write.pop(0), manifest, summary, progress, recorded)
            pending_write.append((job, failed))
        while pending_write:
            _finish(pending_write.pop(0), manifest, summary, progress, recorded)
    progress.close()
    summary.seconds = time.monotonic() - start
    return summary


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
    render.heatmap(np.zeros((2, 2)))  # imports matplotlib's colormaps and Pillow in the worker
    render.png_bytes(np.zeros((2, 2, 3), np.uint8))


def _write_batch(out_dir: str, items, class_names, formats) -> list[tuple[str, list | str]]:
    """Worker job: write the outputs of a batch's images -> ``[(image, outputs or error message)]``."""
    done = []
    for path, folder, original, per_method in items:
        try:
            done.append((path, write_image_outputs(out_dir, folder, original, per_method, class_names,
                                                   formats, durable=False)))
        except Exception as error:  # noqa: BLE001 - e.g. disk full: report the image, keep going
            done.append((path, _one_line(error)))
    return done


def _finish(batch, manifest: Manifest, summary: Summary, progress: Progress, recorded: set) -> None:
    """Wait for one batch's files, then record them (and its failures) in the manifest."""
    job, failed = batch
    records, done = [], 0
    failed = list(failed)
    for path, outputs in job.result() if job is not None else []:
        if isinstance(outputs, str):
            failed.append((path, outputs))
            continue
        done += 1
        summary.files += len(outputs)
        for o in outputs:
            if (path, o.file) in recorded:  # redoing an image cut short: its old lines stay
                continue
            records.append({"image": path, "status": "ok", "method": o.method, "class": o.target,
                            "class_name": o.class_name, "score": o.score, "kind": o.kind,
                            "file": o.file, "outputs": len(outputs)})
    for path, message in failed:
        if (path, message) not in recorded:  # a resumed run does not repeat old news
            records.append({"image": path, "status": "failed", "error": message})
    manifest.append(records)
    summary.explained += done
    summary.failures.extend(failed)
    progress.update(done, len(failed))


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
