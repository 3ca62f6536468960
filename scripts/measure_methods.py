"""Measure every saliency method on the shipped "shapes" model: the "Does it work?" table of the docs.

    .venv/bin/python scripts/measure_methods.py                 # ~ a few minutes on 2 CPU cores
    .venv/bin/python scripts/measure_methods.py --methods gradient gradcam --images 50

For each method, on freshly generated shapes images (seed 3, the held-out test seed of
``scripts/train_shapes.py``) whose object masks are known:

- pointing game (tolerance 2 px) on ``--images`` images, target = the true class;
- RISE deletion / insertion AUC (softmax probability of the top-1 class, 32 steps; deletion to
  zeros and, separately, to the σ=5 blurred image; insertion from that blur) on the first
  ``--curve-images`` images, each beside the same curve with a random pixel order;
- cascading model-parameter randomisation (Adebayo et al.) on the first ``--randomization-images``
  images: Spearman |map|, signed Spearman and SSIM between the fully randomised model's maps and the
  original ones (lower = the method depends on the weights, as it should), and the Spearman
  correlations after re-initialising only the output layer (the class-specific weights).

Prints a markdown table and writes the sanity figure of one image to ``--figure``; with
``--figure-only``, draws the figure alone (``scripts/pictures.py`` declares it so).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import saliency_kit as sk  # noqa: E402
from saliency_kit.cli import sanity  # noqa: E402
from saliency_kit.data import shapes  # noqa: E402
from saliency_kit.evaluate import deletion_insertion, pointing_game, randomization_test  # noqa: E402
from saliency_kit.methods import builtins as builtin_methods  # noqa: E402

ALL_METHODS = tuple(builtin_methods())  # every built-in method, in the order `saliency methods` lists them
# options per method (the API defaults otherwise; occlusion: 8x8 windows, stride 4 on 64x64)
OPTIONS = {
    "smoothgrad": {"seed": 0},
    "squaregrad": {"seed": 0},
    "vargrad": {"seed": 0},
    "rise": {"seed": 0},
    "expected_gradients": {"seed": 0},  # + baselines: 16 shapes images of another seed (main)
}
BASELINE_SEED = 11
FIGURE_METHODS = ("gradient", "guided_backprop", "integrated_gradients", "gradcam", "lrp", "deeplift")
DATA_SEED = 3


def measure(model, method, x, masks, labels, args) -> dict:
    options = OPTIONS.get(method, {})
    row = {"method": method}
    start = time.perf_counter()
    expl = sk.explain(model, x, method, targets=labels, batch_size=args.batch_size, **options)
    row["explain_s"] = time.perf_counter() - start
    row["pointing"] = float(pointing_game(expl, masks, tolerance=2).mean())
    row["pointing_tol0"] = float(pointing_game(expl, masks, tolerance=0).mean())

    n = args.curve_images
    top1 = sk.explain(model, x[:n], method, targets="top1", batch_size=args.batch_size, **options)
    for baseline in ("zeros", "blur"):
        curves = deletion_insertion(model, x[:n], top1, steps=32, baseline=baseline, batch_size=args.batch_size)
        for key in ("deletion_auc", "random_deletion_auc"):
            row[f"{key}_{baseline}"] = float(curves[key].mean())
    for key in ("insertion_auc", "random_insertion_auc"):  # insertion does not depend on the baseline
        row[key] = float(curves[key].mean())

    m = args.randomization_images
    start = time.perf_counter()
    noise_free = {k: v for k, v in options.items() if k != "seed"}  # smoothgrad's noise uses seed=0
    steps = randomization_test(
        model, x[:m], method, "top1", mode="cascading", seed=0, batch_size=args.batch_size, **noise_free
    )
    row["randomization_s"] = time.perf_counter() - start
    row.update({f"rand_{k}": steps[-1][k] for k in ("spearman_abs", "spearman", "ssim")})
    row["top_spearman_abs"] = steps[0]["spearman_abs"]
    row["top_spearman"] = steps[0]["spearman"]
    row["cascade_spearman_abs"] = [round(s["spearman_abs"], 3) for s in steps]
    return row


def markdown(rows, args) -> str:
    head = (
        "| method | pointing game, tol 2 px (0 px) ↑ | deletion AUC, zeros ↓ (random order) "
        "| deletion AUC, blur ↓ (random order) | insertion AUC ↑ (random order) "
        "| output layer randomised: Spearman abs (signed) | all layers randomised: Spearman abs ↓ "
        "| Spearman ↓ | SSIM ↓ |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['pointing']:.1%} ({r['pointing_tol0']:.1%}) "
            f"| {r['deletion_auc_zeros']:.3f} ({r['random_deletion_auc_zeros']:.3f}) "
            f"| {r['deletion_auc_blur']:.3f} ({r['random_deletion_auc_blur']:.3f}) "
            f"| {r['insertion_auc']:.3f} ({r['random_insertion_auc']:.3f}) "
            f"| {r['top_spearman_abs']:.2f} ({r['top_spearman']:.2f}) "
            f"| {r['rand_spearman_abs']:.2f} | {r['rand_spearman']:.2f} | {r['rand_ssim']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(ALL_METHODS), choices=ALL_METHODS)
    parser.add_argument("--images", type=int, default=200, help="images for the pointing game")
    parser.add_argument("--curve-images", type=int, default=100, help="images for deletion/insertion")
    parser.add_argument("--randomization-images", type=int, default=16, help="images for randomisation")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--figure", default=str(ROOT / "docs" / "sanity_example.png"))
    parser.add_argument("--figure-index", type=int, default=0, help="which image of seed 5 to draw")
    parser.add_argument("--figure-only", action="store_true", help="draw the figure, measure nothing")
    args = parser.parse_args(argv)

    model, spec = sk.load_model("shapes")
    if args.figure_only:
        draw_figure(model, spec, args)
        return 0
    images, masks, labels = shapes.make_dataset(args.images, seed=DATA_SEED)
    x = spec.preprocess(images)
    accuracy = float((np.argmax(model.predict(x, verbose=0), axis=1) == labels).mean())
    print(f"shapes model: accuracy {accuracy:.1%} on {len(labels)} fresh images (seed {DATA_SEED})", file=sys.stderr)

    OPTIONS["expected_gradients"]["baselines"] = spec.preprocess(shapes.make_dataset(16, seed=BASELINE_SEED)[0])
    rows = []
    for method in args.methods:
        start = time.perf_counter()
        rows.append(measure(model, method, x, masks, labels, args))
        print(f"{method}: {time.perf_counter() - start:.1f} s {rows[-1]}", file=sys.stderr)
    print(markdown(rows, args))

    if args.figure:
        draw_figure(model, spec, args)
    return 0


def draw_figure(model, spec, args) -> None:
    """The cascading randomisation figure of image ``--figure-index`` of seed 5, to ``--figure``."""
    example, _, _ = shapes.make_dataset(args.figure_index + 1, seed=5)
    image = example[args.figure_index]
    result = sanity.check_methods(model, spec.preprocess(image[None]), FIGURE_METHODS, "top1", mode="cascading")
    fig = sanity.sanity_figure(image, result, class_names=spec.class_names)
    sk.render.save_png(fig, args.figure, dpi=110)
    print(f"wrote {args.figure}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
