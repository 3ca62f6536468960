"""``saliency batch INPUT_DIR --out DIR``: explain every image under a folder (see
:mod:`saliency_kit.batch` for the run loop, the plan, settings, resume and the manifest)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..batch import gallery, outputs
from ..batch import plan as planning
from ..batch import run as pipeline
from ..batch.discovery import parse_shard
from ..targets.tasks import AskError
from . import options as opt
from . import ray_options, tasks
from .explain import add_explain_options, check_before_loading, task_plan, with_model_defaults
from .options import UsageError

__all__ = ["add_parser", "settings", "run"]


def add_parser(subcommands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommands.add_parser(
        "batch",
        parents=[common],
        help="explain every image under a folder",
        description="Explain every image under INPUT_DIR (recursively). Outputs mirror the input "
        "folders under --out; manifest.jsonl gets one line per file written and one "
        "per unreadable input. Files are written atomically; a killed run can be "
        "continued with --resume.",
    )
    parser.add_argument("input_dir", metavar="INPUT_DIR")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    add_explain_options(parser)
    parser.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="take only shard I of N (0 <= I < N): a fixed split by file path, so N "
        "machines can share a folder; each writes manifest.shard-I-of-N.jsonl",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an earlier run into the same --out: skip complete images "
        "(refused if the model, its weights or config, or the options changed)",
    )
    ray_options.add_options(parser)
    parser.set_defaults(handler=run)


def _shard(text: str) -> tuple[int, int]:

    try:
        return parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--shard ")) from None


def settings(
    args: argparse.Namespace, plan: list[tuple[str, dict]], looks: dict[str, outputs.Look], fingerprint: Any
) -> dict:
    """What ``settings.json`` records: everything that changes the files a run writes."""
    return {
        "model": fingerprint,
        "methods": [[name, options, vars(looks[name]).copy()] for name, options in plan],
        "targets": list(args.target or [opt.DEFAULT_TARGET]),
        "format": args.format,
        **({"boxes": args.boxes} if args.boxes is not None else {}),
        **({"output": args.output} if args.output is not None else {}),
    }


def run(args: argparse.Namespace) -> int:
    """Handler of ``saliency batch``: returns the exit status."""
    ray_options.check(args)
    if not os.path.isdir(args.input_dir):
        raise UsageError(f"INPUT_DIR {args.input_dir!r} is not a folder")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} exists and is not a folder")
    try:
        plan_ = planning.plan_run(args.input_dir, args.out, shard=args.shard, resume=args.resume)
    except (FileNotFoundError, planning.RunRefused) as error:
        raise UsageError(opt.message(error)) from error
    methods, _ = check_before_loading(args)
    looks = opt.looks(args, methods)
    try:
        fingerprint = planning.model_fingerprint(args.model, args.weights)
        planning.check_settings(args.out, settings(args, methods, looks, fingerprint))
    except (FileNotFoundError, ValueError) as error:  # RunRefused is a ValueError
        raise UsageError(opt.message(error)) from error

    shard = f" (shard {args.shard[0]}/{args.shard[1]} of {len(plan_.everything)})" if args.shard else ""
    print(
        f"saliency batch: {len(plan_.mine)} images{shard} under {args.input_dir}"
        + (f", {len(plan_.skip)} already complete" if plan_.skip else ""),
        file=sys.stderr,
        flush=True,
    )
    if _nothing_left(args, plan_):
        return 1 if plan_.failed_before else 0

    model, spec = opt.load_model_from_args(args)
    print(opt.describe_model(args, model, spec), flush=True)
    asked = task_plan(args, spec, model)
    spec = tasks.head_spec(spec, model, asked)
    methods = opt.read_option_files(with_model_defaults(methods, spec), spec)
    opt.preflight(model, spec, _sample(model, spec), methods, args.batch_size)
    recipe = pipeline.Recipe(
        task=asked,
        methods=tuple(methods),
        looks=looks,
        batch_size=args.batch_size,
        formats=outputs.FORMATS[args.format],
    )
    batch = pipeline.BatchRun(
        input_dir=args.input_dir, out_dir=args.out, plan=plan_, recipe=recipe, max_pixels=args.max_pixels
    )
    summary = ray_options.run(args, batch) if args.ray is not None else _run_here(batch, model, spec)
    _report(summary, plan_.manifest.path)
    return 1 if summary.failures else 0


def _run_here(batch: pipeline.BatchRun, model: Any, spec: Any) -> pipeline.Summary:
    """The run on this machine (:func:`saliency_kit.batch.run.run`); a target that does not fit
    an image is a usage error."""
    try:
        return pipeline.run(batch, model, spec)
    except AskError as error:
        raise UsageError(error.as_option) from error


def _sample(model, spec):
    """A blank input of the model's size, for the checks before work."""
    import numpy as np

    channels = model.input_shape[-1] if isinstance(model.input_shape, tuple) else 3
    if getattr(spec.preprocess, "channels_first", False):  # [B, C, H, W] (a model converted from PyTorch)
        return np.zeros((1, model.input_shape[1] or 3, *spec.input_size), np.float32)
    return np.zeros((1, *spec.input_size, channels or 3), np.float32)


def _nothing_left(args, plan_) -> bool:
    """A resume whose work left is at most files that failed before and still cannot be read
    finishes here, without loading the model."""
    todo = plan_.todo
    if not args.resume or (todo and set(todo) - set(plan_.failed_before)):
        return False
    unreadable = planning.still_unreadable(args.input_dir, todo, max_pixels=args.max_pixels)
    if set(unreadable) != set(todo):
        return False
    summary = pipeline.Summary(total=len(plan_.mine), skipped=len(plan_.skip), failures=sorted(unreadable.items()))
    _report(summary, plan_.manifest.path)
    return True


def _report(summary, manifest_path: str) -> None:
    rate = summary.explained / summary.seconds if summary.seconds > 0 else 0.0
    print(
        f"saliency batch: {summary.explained} images explained, {summary.skipped} already complete, "
        f"{len(summary.failures)} failed; {summary.files} files written in {summary.seconds:.1f} s "
        f"({rate:.1f} images/s); manifest: {manifest_path}"
    )
    for path, text in summary.failures[:20]:
        print(f"  failed: {text}" if path in text else f"  failed: {path}: {text}")
    if len(summary.failures) > 20:
        print(f"  ... and {len(summary.failures) - 20} more (see the manifest)")
    # the gallery is rebuilt from every manifest in --out (all shards, earlier runs): complete after a resume
    print(f"saliency batch: gallery {gallery.write_gallery(os.path.dirname(manifest_path) or '.')}")
