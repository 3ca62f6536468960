"""``saliency batch ... --ray [ADDRESS]``: the flags, their checks, and the call of the Ray runner
(:mod:`saliency_kit.batch.ray`) in place of the local pipeline."""

from __future__ import annotations

import argparse
import math
import re

from ..batch import ray as ray_runner
from ..batch import ray_job
from ..batch import run as pipeline
from ..targets.tasks import AskError
from .options import UsageError, positive_int

__all__ = ["add_options", "check", "run"]

ADDRESS = re.compile(r"auto|ray://\S+|[\w.-]+:\d+")


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(f"Ray (needs the extra: {ray_runner.INSTALL_HINT.split('  ')[0]})")
    group.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="compute on Ray Data actors: without ADDRESS on a local Ray instance (all "
        "cores); 'auto' or ray://HOST:PORT joins a cluster, whose nodes must all "
        "see INPUT_DIR and --out at the same paths",
    )
    group.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="--ray: actors, each loading the model once (default: one per CPU, or per "
        "--gpus-per-worker GPUs, of the cluster)",
    )
    group.add_argument(
        "--gpus-per-worker",
        type=_gpus,
        default=0.0,
        metavar="G",
        help="--ray: GPUs Ray's scheduler gives each actor (default 0)",
    )
    group.add_argument(
        "--batch-images",
        type=positive_int,
        metavar="N",
        help="--ray: images per actor call (default: --batch-size, the local run's batches)",
    )


def _gpus(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GPUs such as 1 or 0.5, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a number of GPUs >= 0, got {text!r}")
    return value


def check(args: argparse.Namespace) -> None:
    """Before any work: the Ray flags only with --ray, a valid ADDRESS, and Ray Data installed."""
    if args.ray is None:
        given = [
            flag
            for flag, value in (
                ("--workers", args.workers),
                ("--batch-images", args.batch_images),
                ("--gpus-per-worker", args.gpus_per_worker or None),
            )
            if value is not None
        ]
        if given:
            raise UsageError(f"{given[0]} only applies with --ray; received {given[0]} without --ray.")
        return
    if args.ray and not ADDRESS.fullmatch(args.ray):
        raise UsageError(
            f"--ray ADDRESS must be auto, ray://HOST:PORT or HOST:PORT (or nothing, for a local "
            f"Ray instance); received {args.ray!r}."
        )
    if args.shard:
        raise UsageError(
            f"--ray splits the work itself: use it without --shard; received --shard {args.shard[0]}/{args.shard[1]}."
        )
    try:
        ray_runner.import_ray()
    except ray_runner.RayUnavailable as error:
        raise UsageError(str(error)) from None


def run(args: argparse.Namespace, batch: pipeline.BatchRun) -> pipeline.Summary:
    """The Ray runner with the command's model and cluster flags; a node that cannot see --out,
    or a target that does not fit an image, is a usage error (as in the local run)."""
    model = ray_job.ModelSource.from_args(args.model, args.weights, getattr(args, "unsafe", False))
    cluster = ray_job.Cluster(
        address=args.ray or None,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        batch_images=args.batch_images,
    )
    try:
        return ray_runner.run(batch, model, cluster)
    except ray_runner.OutputNotShared as error:
        raise UsageError(str(error)) from None
    except AskError as error:
        raise UsageError(error.as_option) from error
    except ConnectionError as error:  # no cluster at that address
        raise UsageError(
            f"--ray {args.ray}: cannot join a Ray cluster there (start one with 'ray start "
            f"--head', or give its address); received {' '.join(str(error).split())}"
        ) from None
