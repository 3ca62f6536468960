"""``saliency sanity IMAGE``: the model-randomisation sanity check as a figure and a JSON file.

For each method, the map of the trained model is drawn first, then the map after each
randomisation step of :func:`saliency_kit.evaluate.iter_randomization` (cascading: the top layers
re-initialised cumulatively; independent: one layer at a time). A method whose maps do not change
as the weights become random is not explaining the model (Adebayo et al. 2018).

Files written to ``--out``: ``sanity_<image stem>.png`` and ``sanity_<image stem>.json`` (the
similarities of every step, per method, as returned by ``sk.evaluate.randomization_test``).
"""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence

import numpy as np

DEFAULT_METHODS = ("gradient", "guided_backprop", "gradcam")
MAX_STEP_COLUMNS = 16  # a figure for a 100-layer model shows this many steps, evenly spaced


def add_parser(subparsers) -> None:
    """Add the ``sanity`` subcommand to ``subparsers`` (an ``argparse`` sub-parser action)."""
    from .cli import add_model_options

    parser = subparsers.add_parser(
        "sanity",
        help="model-randomisation sanity check of saliency methods (figure + JSON)",
        description=(
            "Re-initialise the model's weighted layers (from the output down) and show how each "
            "method's map changes (Adebayo et al. 2018). Maps that stay the same do not explain the model."
        ),
    )
    parser.add_argument("image", metavar="IMAGE", help="an image file")
    add_model_options(parser)
    parser.add_argument(
        "--method", action="append", dest="methods", metavar="M",
        help=f"a method to check (repeatable; default: {', '.join(DEFAULT_METHODS)})",
    )
    parser.add_argument("--target", default="top1", metavar="T", help="topK, a class index or a class name (default: top1)")
    parser.add_argument("--out", default="saliency_out", metavar="DIR", help="output directory (default: saliency_out)")
    parser.add_argument("--mode", choices=("cascading", "independent"), default="cascading",
                        help="re-initialise layers cumulatively from the output (default) or one at a time")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the re-initialisation (default: 0)")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Handler of ``saliency sanity``: returns the exit status."""
    from .cli import UsageError, load_model_from_args
    from .images import load_images
    from .methods import names as method_names
    from .render import save_png

    methods = list(dict.fromkeys(args.methods or DEFAULT_METHODS))
    unknown = [m for m in methods if m not in method_names()]
    if unknown:
        raise UsageError(f"unknown method {unknown[0]!r}; choose from: {', '.join(method_names())}")
    model, spec = load_model_from_args(args)
    try:
        targets = parse_target(args.target, spec.class_names)
    except ValueError as error:
        raise UsageError(str(error)) from None
    inputs, originals = load_images([args.image], spec)
    batch_size = getattr(args, "batch_size", None) or 32
    result = check_methods(
        model, inputs, methods, targets,
        mode=args.mode, seed=args.seed, batch_size=batch_size,
    )
    stem = os.path.splitext(os.path.basename(args.image))[0]
    png = os.path.join(args.out, f"sanity_{stem}.png")
    fig = sanity_figure(originals[0], result, class_names=spec.class_names)
    save_png(fig, png, dpi=100)
    report = {
        "image": os.path.abspath(args.image),
        "model": getattr(spec, "name", None),
        "mode": args.mode,
        "seed": args.seed,
        "methods": {m: r["steps"] for m, r in result.items()},
        "target": {m: _target_info(r, spec.class_names) for m, r in result.items()},
    }
    path = write_json(report, os.path.join(args.out, f"sanity_{stem}.json"))
    for method, r in result.items():
        last = r["steps"][-1]
        print(f"{method}: fully randomised vs original: spearman_abs={last['spearman_abs']:.3f} "
              f"spearman={last['spearman']:.3f} ssim={last['ssim']:.3f}")
    print(png)
    print(path)
    return 0


def parse_target(text: str, class_names: Sequence[str] | None):
    """``"top1"`` stays as it is; a class index or a class name becomes that index."""
    if text.startswith("top"):
        return text
    names = list(class_names or [])
    if text.lstrip("-").isdigit():
        index = int(text)
        if names and not 0 <= index < len(names):
            raise ValueError(f"--target {index} is not a class index of this model (0..{len(names) - 1})")
        return index
    if text in names:
        return names.index(text)
    raise ValueError(f"--target must be topK, a class index or a class name; {text!r} is none of "
                     f"those (classes: {', '.join(names) if names else 'unnamed'})")


def check_methods(model, inputs, methods, targets="top1", *, mode="cascading", seed=0, **options) -> dict:
    """Run the randomisation test for each method; keep the magnitude maps of the first input.

    Returns ``{method: {"maps": [S+1, H, W] (original first), "layers": [S] paths,
    "steps": [S] dicts as randomization_test returns, "target": int, "score": float}}``.
    """
    from .evaluate import compare_maps, comparison_maps, iter_randomization

    result = {}
    for method in methods:
        maps, steps, original = [], [], None
        for path, expl, randomized in iter_randomization(
            model, inputs, method, targets, mode=mode, seed=seed, **options
        ):
            maps.append(comparison_maps(expl)[1][0, 0])  # the magnitude map, as compared
            if path is None:
                original = expl
                continue
            steps.append({"layer": path, **compare_maps(original, expl), "step": len(steps) + 1,
                          "randomized": randomized})
        result[method] = {
            "maps": np.stack(maps),
            "layers": [s["layer"] for s in steps],
            "steps": steps,
            "target": int(np.asarray(original.targets)[0, 0]),
            "score": float(np.asarray(original.scores)[0, 0]),
            "mode": mode,
        }
    return result


def _target_info(r, class_names):
    names = list(class_names or [])
    t = r["target"]
    return {"index": t, "name": names[t] if 0 <= t < len(names) else None}


def _columns(n_steps: int) -> list[int]:
    """Which steps to draw: all of them, or ``MAX_STEP_COLUMNS`` evenly spaced ending with the last."""
    if n_steps <= MAX_STEP_COLUMNS:
        return list(range(1, n_steps + 1))
    return sorted({int(round(x)) for x in np.linspace(1, n_steps, MAX_STEP_COLUMNS)})


def sanity_figure(image, result: dict, *, class_names=None, panel_inches: float = 1.25):
    """A :class:`matplotlib.figure.Figure`: one row per method of ``result`` (from
    :func:`check_methods`); the image, the original map, then the map after each step, titled
    with the layer just re-initialised and the Spearman rank correlation (absolute) with the original.
    """
    from matplotlib.figure import Figure

    from .render import METHOD_TITLES, heatmap

    methods = list(result)
    n_steps = max(len(r["layers"]) for r in result.values())
    cols = _columns(n_steps)
    ncols = 2 + len(cols)
    fig = Figure(figsize=(panel_inches * ncols, panel_inches * 1.25 * len(methods) + 0.4))
    axes = np.atleast_2d(fig.subplots(len(methods), ncols, squeeze=False))
    for row, method in enumerate(methods):
        r = result[method]
        names = list(class_names or [])
        target = names[r["target"]] if 0 <= r["target"] < len(names) else f"class {r['target']}"
        panels = [("image", None, np.asarray(image)), ("original", None, heatmap(r["maps"][0]))]
        for step in cols:
            if step <= len(r["layers"]):
                info = r["steps"][step - 1]
                label = info["layer"].split("/")[-1]
                panels.append((label, info["spearman_abs"], heatmap(r["maps"][step])))
            else:
                panels.append(("", None, None))
        for col, (title, rho, picture) in enumerate(panels):
            ax = axes[row, col]
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
            if picture is None:
                ax.set_axis_off()
                continue
            ax.imshow(picture, interpolation="nearest")
            ax.set_title(title if rho is None else f"{title}\n\u03c1={rho:.2f}", fontsize=7)
        axes[row, 0].set_ylabel(f"{METHOD_TITLES.get(method, method)}\n({target})", fontsize=8)
    mode = result[methods[0]].get("mode", "cascading")
    fig.suptitle(
        f"{mode.capitalize()} randomisation: re-initialised layer \u2192 map (\u03c1 = Spearman |map| vs original)",
        fontsize=9,
    )
    return fig


def write_json(data, path: str) -> str:
    """Write ``data`` as indented JSON atomically; NaN becomes ``null``."""
    from .render import atomic_path

    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, (float, np.floating)):
            return None if not np.isfinite(value) else float(value)
        if isinstance(value, np.integer):
            return int(value)
        return value

    with atomic_path(path) as temp:
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(clean(data), handle, indent=2)
            handle.write("\n")
    return path
