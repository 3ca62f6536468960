#!/usr/bin/env python
"""Benchmark ``saliency batch``: throughput against the engine alone, and memory growth.

    python scripts/bench_batch.py                       # 1,000 shapes images, guided backprop
    python scripts/bench_batch.py --images 300 --method gradcam --keep /tmp/bench

What it does:

1. writes ``--images`` PNG files of the shapes task into a temporary folder (10 sub-folders);
2. runs ``saliency batch`` on them *in this process* (``saliency_kit.cli.main``), sampling the
   resident memory (RSS) while a thread watches the manifest, and reads the run's own timing
   (the processing loop: decoding, explaining, rendering, writing; model loading excluded);
3. times ``sk.explain`` alone on the same images in a fresh process, the images already decoded
   and preprocessed in memory, in batches of the same size (the first call's compilation is
   included in both measurements; model loading and imports in neither).

Reported: images/s of each, their ratio (target >= 0.9), and RSS after 100 and after all images
(target: growth <= 10%). The machine is shared: repeat the run before trusting a single figure.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def write_images(folder: str, count: int, seed: int) -> list[str]:
    from PIL import Image

    from saliency_kit.data.shapes import make_dataset

    images, _, labels = make_dataset(count, seed=seed)
    paths = []
    for i, (image, label) in enumerate(zip(images, labels)):
        path = os.path.join(folder, f"part{i % 10}", f"img{i:05d}_{label}.png")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(image).save(path)
        paths.append(path)
    return paths


class MemoryWatch(threading.Thread):
    """Samples (images recorded in the manifest, RSS) every ``period`` seconds.

    Reads only the bytes appended since its last look, so that watching costs the run (which
    shares this process and its GIL) next to nothing.
    """

    def __init__(self, manifest: str, period: float = 0.2):
        super().__init__(daemon=True)
        self.manifest, self.period = manifest, period
        self.samples: list[tuple[int, float]] = []
        self.stop = threading.Event()
        self.offset, self.images = 0, set()

    def images_done(self) -> int:
        try:
            with open(self.manifest, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return 0
        end = data.rfind(b"\n") + 1  # whole lines only
        self.offset += end
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError, KeyError):
                self.images.add(json.loads(line)["image"])
        return len(self.images)

    def run(self):
        while not self.stop.is_set():
            self.samples.append((self.images_done(), rss_mib()))
            self.stop.wait(self.period)


def engine_only(args) -> None:
    """Time ``sk.explain`` on the images under ``args.engine_only``, decoded beforehand (this
    process: model loading and decoding untimed, the first call's compilation timed)."""
    import saliency_kit as sk

    model, spec = sk.load_model(args.model, **({"weights": args.weights} if args.weights else {}))
    paths = sorted(os.path.join(d, f) for d, _, files in os.walk(args.engine_only) for f in files)
    x, _ = sk.load_images(paths, spec)
    cpu_start = time.process_time()
    start = time.perf_counter()
    for i in range(0, len(x), args.batch_size):
        sk.explain(model, x[i : i + args.batch_size], args.method, "top1", batch_size=args.batch_size)
    print(time.perf_counter() - start, time.process_time() - cpu_start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--method", default="guided_backprop")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--model", default="shapes")
    parser.add_argument("--weights", help="passed on to load_model, e.g. 'random' for a named model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep the files (default: a temporary folder)")
    parser.add_argument("--engine-only", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument(
        "--ray",
        action="store_true",
        help="instead: the Ray runner (--workers actors) against the local run (scripts/bench_ray.py)",
    )
    parser.add_argument("--workers", type=int, default=2, help="--ray: Ray actors (default 2)")
    parser.add_argument("--timeline", action="store_true", help="--ray: also print when images were recorded")
    parser.add_argument("--ray-part", choices=("local", "ray"), help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ray or args.ray_part:
        import bench_ray

        return bench_ray.part(args) or 0 if args.ray_part else bench_ray.main(args)
    if args.engine_only:
        engine_only(args)
        return 0

    with contextlib.ExitStack() as stack:
        work = args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_batch_"))
        inputs, out = os.path.join(work, "in"), os.path.join(work, "out")
        if os.path.exists(out):
            raise SystemExit(f"{out} exists: remove it or choose another --keep folder")
        write_images(inputs, args.images, args.seed)

        from saliency_kit.cli import main as saliency

        watch = MemoryWatch(os.path.join(out, "manifest.jsonl"))
        watch.start()
        printed = io.StringIO()
        cpu_start = time.process_time()
        start = time.perf_counter()
        with contextlib.redirect_stdout(printed):
            weights = ["--weights", args.weights] if args.weights else []
            status = saliency(
                [
                    "batch",
                    inputs,
                    "--out",
                    out,
                    "--model",
                    args.model,
                    *weights,
                    "--method",
                    args.method,
                    "--batch-size",
                    str(args.batch_size),
                ]
            )
        wall = time.perf_counter() - start
        batch_cpu = time.process_time() - cpu_start
        watch.stop.set()
        watch.join()
        rss_end = rss_mib()
        summary = printed.getvalue()
        if status != 0:
            raise SystemExit(f"saliency batch failed with status {status}:\n{summary}")
        loop_seconds = float(re.search(r"written in ([\d.]+) s", summary)[1])

        # The engine alone, in a fresh process like the batch run (so that neither profits from
        # the other's warm caches: TensorFlow's tracing, autograph's conversions).
        measured = subprocess.run(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--engine-only",
                inputs,
                "--model",
                args.model,
                "--method",
                args.method,
                "--batch-size",
                str(args.batch_size),
                *(["--weights", args.weights] if args.weights else []),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        engine_seconds, engine_cpu = map(float, measured.split()[-2:])

    batch_rate, engine_rate = args.images / loop_seconds, args.images / engine_seconds
    at_100 = next((rss for done, rss in watch.samples if done >= 100), float("nan"))
    late = [rss for done, rss in watch.samples if done >= args.images] or [rss_end]
    at_end = max(late)
    print(f"images: {args.images} ({args.model}, {args.method}, batch size {args.batch_size})")
    print(
        f"saliency batch : {batch_rate:7.1f} images/s (processing loop {loop_seconds:.1f} s; "
        f"whole command incl. model load {wall:.1f} s)"
    )
    print(f"engine alone   : {engine_rate:7.1f} images/s ({engine_seconds:.1f} s)")
    print(f"ratio          : {batch_rate / engine_rate:.2f} (target >= 0.9)")
    print(
        f"CPU time per image (all threads): saliency batch {1e3 * batch_cpu / args.images:.1f} ms "
        f"(whole command), engine alone {1e3 * engine_cpu / args.images:.1f} ms"
    )
    print(
        f"RSS after 100 images: {at_100:.0f} MiB; after {args.images}: {at_end:.0f} MiB; "
        f"growth {100 * (at_end / at_100 - 1):+.1f}% (target <= 10%)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
