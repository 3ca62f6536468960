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
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import methods as registry
from ..files import save_png, write_json
from ..images import ImageLoadError, load_images
from ..render import fit_text, heatmap
from . import options as opt
from .explain import with_model_defaults
from .options import UsageError

if TYPE_CHECKING:
    import keras
    from matplotlib.figure import Figure

    from ..explanation import Explanation

__all__ = ["default_methods", "add_parser", "run", "check_methods", "sanity_figure"]

MAX_STEP_COLUMNS = 16  # a figure for a 100-layer model shows this many steps, evenly spaced


def default_methods() -> list[str]:
    """From the declarations: the first plain gradient-like method (no options, unsigned), the
    command line's default method, and the first CAM method."""
    declared = [registry.get(name) for name in registry.names()]
    plain = next((m.name for m in declared if not m.options and not m.cam and not m.signed), None)
    cam = next((m.name for m in declared if m.cam), None)
    return list(dict.fromkeys(name for name in (plain, opt.DEFAULT_METHOD, cam) if name))


def add_parser(subcommands: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``sanity`` subcommand to ``subcommands`` (an ``argparse`` sub-parser action)."""
    parser = subcommands.add_parser(
        "sanity",
        parents=[common],
        help="model-randomisation sanity check of saliency methods (figure + JSON)",
        description=(
            "Re-initialise the model's weighted layers (from the output down) and show how each "
            "method's map changes (Adebayo et al. 2018). Maps that stay the same do not explain the model."
        ),
    )
    parser.add_argument("image", metavar="IMAGE", help="an image file")
    opt.add_model_options(parser)
    parser.add_argument(
        "--method",
        action="append",
        metavar="M",
        help="a method to check (repeatable; default: a plain gradient, guided backprop and a CAM method)",
    )
    parser.add_argument(
        "--target",
        default=opt.DEFAULT_TARGET,
        metavar="T",
        help="topK (any case), a class index or a class name, as for explain (default: top1)",
    )
    parser.add_argument(
        "--out", default=opt.DEFAULT_OUT, metavar="DIR", help=f"output directory (default: {opt.DEFAULT_OUT})"
    )
    parser.add_argument(
        "--mode",
        choices=("cascading", "independent"),
        default="cascading",
        help="re-initialise layers cumulatively from the output (default) or one at a time",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the re-initialisation (default: 0)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``saliency sanity``: returns the exit status."""
    if not os.path.isfile(args.image):
        raise UsageError(f"no such file: {args.image}")
    args.method = list(dict.fromkeys(args.method or default_methods()))
    plan = opt.method_plan(args)
    spec = opt.model_spec(args)
    if spec is not None and spec.class_names:
        opt.parse_targets([args.target], spec.class_names, len(spec.class_names), debug=args.debug)
    model, spec = opt.load_model_from_args(args)
    print(opt.describe_model(args, model, spec), flush=True)
    target_spec = opt.parse_targets([args.target], spec.class_names, len(spec.class_names), debug=args.debug)
    ((kind, value),) = target_spec.parts
    target = f"top{value}" if kind == "top" else int(value)
    plan = opt.read_option_files(with_model_defaults(plan, spec), spec)
    try:
        inputs, originals = load_images([args.image], spec)
    except ImageLoadError as error:
        raise UsageError(opt.message(error)) from error
    opt.preflight(model, spec, inputs, plan, args.batch_size)
    result = {}
    for method, options in plan:
        result.update(
            check_methods(
                model, inputs, [method], target, mode=args.mode, seed=args.seed, batch_size=args.batch_size, **options
            )
        )
    stem = os.path.splitext(os.path.basename(args.image))[0]
    png = os.path.join(args.out, f"sanity_{stem}.png")
    fig = sanity_figure(originals[0], result, class_names=spec.class_names)
    save_png(fig, png, dpi=100)
    report = {
        "image": os.path.abspath(args.image),
        "model": spec.name,
        "mode": args.mode,
        "seed": args.seed,
        "methods": {m: r["steps"] for m, r in result.items()},
        "target": {m: _target_info(r, spec.class_names) for m, r in result.items()},
    }
    path = write_json(report, os.path.join(args.out, f"sanity_{stem}.json"))
    for method, r in result.items():
        last = r["steps"][-1]
        print(
            f"{method}: fully randomised vs original: spearman_abs={last['spearman_abs']:.3f} "
            f"spearman={last['spearman']:.3f} ssim={last['ssim']:.3f}"
        )
    print(png)
    print(path)
    return 0


def check_methods(
    model: keras.Model,
    inputs: np.ndarray,
    methods: Sequence[str],
    targets: Any = "top1",
    *,
    mode: str = "cascading",
    seed: int = 0,
    **options: Any,
) -> dict:
    """Run the randomisation test for each method; keep the magnitude maps of the first input.

    Returns ``{method: {"maps": [S+1, H, W] (original first), "layers": [S] paths,
    "steps": [S] dicts as randomization_test returns, "target": int, "score": float}}``.
    """
    from ..evaluate import compare_maps, comparison_maps, iter_randomization

    result = {}
    for method in methods:
        maps: list[np.ndarray] = []
        steps: list[dict] = []
        original: Explanation | None = None
        for path, expl, randomized in iter_randomization(
            model, inputs, method, targets, mode=mode, seed=seed, **options
        ):
            maps.append(comparison_maps(expl)[1][0, 0])  # the magnitude map, as compared
            if path is None:
                original = expl
                continue
            if original is None:
                raise RuntimeError(f"{method}: the randomization test gave a randomized map before the original.")
            steps.append(
                {"layer": path, **compare_maps(original, expl), "step": len(steps) + 1, "randomized": randomized}
            )
        if original is None:
            raise RuntimeError(f"{method}: the randomization test gave no original map.")
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


def sanity_figure(
    image: np.ndarray, result: dict, *, class_names: Sequence[str] | None = None, panel_inches: float = 1.25
) -> Figure:
    """A :class:`matplotlib.figure.Figure`: one row per method of ``result`` (from
    :func:`check_methods`); the image, the original map, then the map after each step, titled
    with the layer just re-initialised and the Spearman rank correlation (absolute) with the original.
    """
    from matplotlib.figure import Figure

    methods = list(result)
    n_steps = max(len(r["layers"]) for r in result.values())
    cols = _columns(n_steps)
    ncols = 2 + len(cols)
    # each row: the panel, two lines of title (layer name, wrapped to the panel's width) and ρ
    fig = Figure(
        figsize=(panel_inches * ncols, (panel_inches * 1.25 + 0.15) * len(methods) + 0.5), layout="constrained"
    )
    axes = np.atleast_2d(fig.subplots(len(methods), ncols, squeeze=False))
    for row, method in enumerate(methods):
        r = result[method]
        names = list(class_names or [])
        target = names[r["target"]] if 0 <= r["target"] < len(names) else f"class {r['target']}"
        panels: list[tuple[str, float | None, np.ndarray | None]] = [
            ("image", None, np.asarray(image)),
            ("original", None, heatmap(r["maps"][0])),
        ]
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
            label = fit_text(title, panel_inches, 7, lines=2)
            ax.set_title(label if rho is None else f"{label}\n\u03c1={rho:.2f}", fontsize=7)
        axes[row, 0].set_ylabel(f"{_title(method)}\n({target})", fontsize=8)
    mode = result[methods[0]].get("mode", "cascading")
    fig.suptitle(
        f"{mode.capitalize()} randomisation: re-initialised layer \u2192 map (\u03c1 = Spearman |map| vs original)",
        fontsize=9,
    )
    return fig


def _title(method: str) -> str:
    try:
        return registry.get(method).title
    except ValueError:
        return method
