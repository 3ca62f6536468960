"""``python scripts/bench_batch.py --ray``: the Ray runner against the local pipeline, same images.

    python scripts/bench_batch.py --ray                    # 1,000 shapes images, 2 Ray CPU workers
    python scripts/bench_batch.py --ray --images 300 --workers 2 --method gradcam

Each run happens in a fresh process of its own (neither profits from the other's warm caches or
shares its memory), on the same images, with the same method, targets and batch size:

* local: ``saliency_kit.batch.run.run`` (what ``saliency batch`` runs), the model loaded first;
* ray: ``saliency_kit.batch.ray.run`` on a local Ray instance started by the runner (all
  cores), ``--workers`` actors, each loading the model itself.

Reported per run: images/s over the whole call (model loading, Ray's start and the actors'
start included), images/s in steady state (from the first image recorded in the manifest to the
last), their ratios Ray/local (target >= 0.8), and the Ray driver's resident memory (RSS) after
100 images and at the end (target: flat). The machine is shared: repeat before trusting a figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def _timed_watch():
    from bench_batch import MemoryWatch, rss_mib

    class TimedWatch(MemoryWatch):
        """Samples ``(time, images recorded in the manifest, RSS)``."""

        def run(self):
            while not self.stop.is_set():
                self.samples.append((time.perf_counter(), self.images_done(), rss_mib()))
                self.stop.wait(self.period)

    return TimedWatch


def part(args) -> None:
    """One run, in this process; prints a JSON line of its measurements."""
    import contextlib
    import io

    from bench_batch import rss_mib

    from saliency_kit.batch import outputs, ray_job
    from saliency_kit.batch import ray as ray_runner
    from saliency_kit.batch import run as pipeline
    from saliency_kit.batch.plan import plan_run
    from saliency_kit.targets.tasks import Request, TaskPlan

    TimedWatch = _timed_watch()
    inputs, out = args.inputs, args.out
    recipe = pipeline.Recipe(
        task=TaskPlan("classification", (Request("top1", "top", count=1),)),
        methods=((args.method, {}),),
        looks={args.method: outputs.Look()},
        batch_size=args.batch_size,
        formats=("png",),
    )
    watch = TimedWatch(os.path.join(out, outputs.MANIFEST))
    start = time.perf_counter()
    rss_start = rss_mib()
    watch.start()
    plan = plan_run(inputs, out, shard=None, resume=False)
    batch = pipeline.BatchRun(input_dir=inputs, out_dir=out, plan=plan, recipe=recipe)
    with contextlib.redirect_stderr(io.StringIO()):
        if args.ray_part == "local":
            import saliency_kit as sk

            model, spec = sk.load_model(args.model)
            summary = pipeline.run(batch, model, spec)
        else:
            summary = ray_runner.run(batch, ray_job.ModelSource(args.model), ray_job.Cluster(workers=args.workers))
    wall = time.perf_counter() - start
    watch.stop.set()
    watch.join()
    recorded = [(t, done) for t, done, _ in watch.samples if done > 0]
    first = recorded[0] if recorded else (start, 0)
    steady = (summary.explained - first[1]) / max(recorded[-1][0] - first[0], 1e-9) if len(recorded) > 1 else 0.0
    at_100 = next((rss for _, done, rss in watch.samples if done >= 100), float("nan"))
    changes = [
        (round(t - start, 1), done)
        for i, (t, done, _) in enumerate(watch.samples)
        if i == 0 or done != watch.samples[i - 1][1]
    ]
    print(
        json.dumps(
            {
                "explained": summary.explained,
                "wall": wall,
                "steady": steady,
                "timeline": changes,
                "rss_start": rss_start,
                "rss_100": at_100,
                "rss_end": rss_mib(),
                "rss_max": max(rss for _, _, rss in watch.samples),
            }
        )
    )


def main(args) -> int:
    from bench_batch import write_images

    here = os.path.dirname(os.path.abspath(__file__))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(here), os.environ.get("PYTHONPATH")])),
    }
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_ray_") as work:
        inputs = os.path.join(work, "in")
        write_images(inputs, args.images, args.seed)
        for which in ("local", "ray"):
            command = [
                sys.executable,
                os.path.join(here, "bench_batch.py"),
                "--ray-part",
                which,
                "--inputs",
                inputs,
                "--out",
                os.path.join(work, which),
                "--model",
                args.model,
                "--method",
                args.method,
                "--batch-size",
                str(args.batch_size),
                "--workers",
                str(args.workers),
            ]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{which} run failed:\n{done.stderr[-3000:]}")
            results[which] = json.loads(done.stdout.strip().splitlines()[-1])
    local, ray = results["local"], results["ray"]
    n = args.images
    print(
        f"images: {n} ({args.model}, {args.method}, batch size {args.batch_size}); "
        f"Ray: {args.workers} CPU workers on a local instance; {os.cpu_count()} cores"
    )
    print(
        f"local pipeline : {n / local['wall']:6.1f} images/s whole call ({local['wall']:.1f} s, model load "
        f"included); {local['steady']:6.1f} images/s steady"
    )
    print(
        f"ray runner     : {n / ray['wall']:6.1f} images/s whole call ({ray['wall']:.1f} s, Ray and actors' "
        f"start included); {ray['steady']:6.1f} images/s steady"
    )
    print(
        f"ratio ray/local: {local['wall'] / ray['wall']:.2f} whole call, "
        f"{ray['steady'] / max(local['steady'], 1e-9):.2f} steady (target >= 0.8)"
    )
    print(
        f"Ray driver RSS : {ray['rss_start']:.0f} MiB at start, {ray['rss_100']:.0f} MiB after 100 images, "
        f"{ray['rss_end']:.0f} MiB at the end (max {ray['rss_max']:.0f}); growth after 100 images "
        f"{100 * (ray['rss_end'] / ray['rss_100'] - 1):+.1f}%"
    )
    if args.timeline:
        for which in ("local", "ray"):
            print(f"{which} timeline (seconds, images recorded):", results[which]["timeline"])
    return 0
