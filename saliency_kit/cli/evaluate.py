"""``saliency evaluate IMAGE...``: every method × metric on your own images, as a table and a chart.

Each image is scored by :func:`saliency_kit.evaluate.compare` (a seeded ``random`` map is always
one of the methods); its results are written to ``DIR/metrics_parts/`` as soon as they are known,
so ``--resume`` continues a run that was stopped, as ``saliency batch`` does. When all images are
done, the table is written:

- ``metrics.csv``: one row per method, metric and image (``value``), the metric's direction;
- ``metrics.json``: the settings, the images, and per method and metric the mean, standard
  deviation and per-image values;
- ``metrics.png``: one panel per metric, methods ranked best first, one dot per image;

and printed: the three paths, then each method's mean per metric (one line per method).

When ``--out`` holds a ``saliency batch`` gallery (``index.html``), it is rebuilt to link them.

Object masks for the localisation metrics are read from files beside the images named
``STEM<suffix>.png`` (``--mask-suffix``, default ``_mask``; white = object); images without one
get no localisation values.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..batch import plan as planning
from ..batch.gallery import write_gallery
from ..batch.progress import Progress
from ..files import remove_partials, write_atomic, write_json
from ..images import ImageLoadError, load_image
from ..render import save_png
from . import options as opt
from .explain import with_model_defaults
from .options import UsageError, did_you_mean

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "add_parser",
    "metric_names",
    "metrics_epilog",
    "mask_path",
    "load_mask",
    "run",
    "collect",
    "write_table",
    "format_table",
    "metrics_figure",
]

#: Metrics scored when no --metric is given (fast on any model); localisation ones when masks exist.
DEFAULT_METRICS = ("faithfulness_correlation", "region_perturbation", "max_sensitivity", "sparseness", "random_logit")
DEFAULT_LOCALISATION = ("pointing_game", "relevance_mass_accuracy", "auc")
#: What the command line changes from the library's (Quantus') defaults, to keep a run short.
CLI_METRIC_OPTIONS = {
    "max_sensitivity": {"nr_samples": 20},
    "avg_sensitivity": {"nr_samples": 20},
    "relative_input_stability": {"nr_samples": 20},
    "monotonicity_correlation": {"nr_samples": 10, "features_in_step": 64},
    "pixel_flipping": {"features_in_step": 64},
    "non_sensitivity": {"features_in_step": 64},
}
PARTS = "metrics_parts"
SETTINGS = "metrics_settings.json"

CAVEATS = (
    "Read the numbers with care: a metric's value depends on its baseline (what 'removing' a pixel "
    "means) and its perturbation, so compare methods within one table, never values across settings; "
    "sensitivity metrics do not flag a useless map by themselves (a constant map is perfectly stable); "
    "localisation rewards maps shaped like the object, not maps faithful to the model. The 'random' "
    "row (a seeded random map) is always in the table: a metric that cannot tell a method from it "
    "says nothing about that method here."
)


def metric_names() -> list[str]:
    """The name of every declared metric (``saliency_kit.evaluate.metrics()``, plugins included).
    Imports the metrics (NumPy and SciPy), so the parser asks for them only when they are needed:
    to check ``--metric`` and to print ``--help``."""
    from ..evaluate import registry

    return registry.names()


def metrics_epilog() -> str:
    """The end of ``saliency evaluate --help``: every declared metric, by family and direction."""
    from ..evaluate import metrics

    groups: dict[tuple[str, str], list[str]] = {}
    for declared in metrics():
        masks = " (needs masks)" if declared.needs_masks else ""
        groups.setdefault((declared.family, declared.direction), []).append(declared.name + masks)
    listed = "; ".join(
        f"{family}, {better} is better: {', '.join(names)}" for (family, better), names in groups.items()
    )
    return (
        f"Metrics — {listed}. --seed N seeds every metric's draws, the random map and the noisy methods (default: 0)."
    )


class _HelpWithMetrics(argparse.Action):
    """``-h``/``--help`` of ``saliency evaluate``: the help, ending with the declared metrics (read
    only now, so that building the parser imports no metric)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        parser.epilog = metrics_epilog()
        parser.print_help()
        parser.exit()


def add_parser(subcommands: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``evaluate`` subcommand to ``subcommands`` (an ``argparse`` sub-parser action)."""
    parser = subcommands.add_parser(
        "evaluate",
        parents=[common],
        add_help=False,
        help="which method should I trust? every method x metric on your images (CSV, JSON, chart)",
        description=(
            "Score every --method with every --metric on the images (a seeded random map is "
            "always added as a method), and write metrics.csv, metrics.json and metrics.png "
            "to --out. " + CAVEATS
        ),
    )
    parser.add_argument("-h", "--help", action=_HelpWithMetrics, help="show this help message and exit")
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    opt.add_model_options(parser)
    opt.add_method_options(parser)
    parser.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help=f"a metric (repeatable; default: {', '.join(DEFAULT_METRICS)}, and "
        f"{', '.join(DEFAULT_LOCALISATION)} when masks are found)",
    )
    parser.add_argument(
        "--mask-suffix",
        default="_mask",
        metavar="S",
        help="object masks are the files STEM<S>.png beside the images (default: _mask)",
    )
    parser.add_argument(
        "--out", default=opt.DEFAULT_OUT, metavar="DIR", help=f"output directory (default: {opt.DEFAULT_OUT})"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the images already scored in --out (same settings) and score the rest",
    )
    parser.set_defaults(handler=run)


def _metrics(args: argparse.Namespace, have_masks: bool) -> list[str]:
    chosen = list(dict.fromkeys(args.metric or [*DEFAULT_METRICS, *(DEFAULT_LOCALISATION if have_masks else ())]))
    known = metric_names()
    for name in chosen:
        if name not in known:
            raise UsageError(f"unknown metric {name!r}{did_you_mean(name, known)}; choose from: {', '.join(known)}")
    return chosen


def mask_path(image: str, suffix: str) -> str | None:
    """``STEM<suffix>.png`` (or the image's own extension) beside ``image``, if it exists."""
    stem, ext = os.path.splitext(image)
    for candidate in (f"{stem}{suffix}.png", f"{stem}{suffix}{ext}"):
        if os.path.isfile(candidate):
            return candidate
    return None


def load_mask(path: str, size: tuple[int, int]) -> np.ndarray:
    """A mask file as bool ``[H, W]`` at the model's input size (nearest neighbour; > 50 % grey)."""
    from PIL import Image

    with Image.open(path) as image:
        grey = image.convert("L").resize((size[1], size[0]), Image.Resampling.NEAREST)
    return np.asarray(grey) > 127


def _part_name(image: str) -> str:
    return hashlib.sha256(os.path.abspath(image).encode()).hexdigest()[:20] + ".json"


def run(args: argparse.Namespace) -> int:
    """Handler of ``saliency evaluate``: returns the exit status."""
    from ..evaluate import compare, registry

    missing = [p for p in args.images if not os.path.isfile(p)]
    if missing:
        raise UsageError(f"no such file: {missing[0]}")
    masks_found = {p: mask_path(p, args.mask_suffix) for p in args.images}
    # a mask file given as an image is not scored as an image
    images = [p for p in dict.fromkeys(args.images) if p not in {m for m in masks_found.values() if m}]
    metrics = _metrics(args, any(masks_found[p] for p in images))
    seed_flag = opt.OPTION_DEST + "seed"  # --seed seeds the metrics too, and every noisy method
    seed = getattr(args, seed_flag, None) or 0
    setattr(args, seed_flag, None)
    plan = opt.method_plan(args)
    texts = args.target or [opt.DEFAULT_TARGET]
    if len(texts) != 1:
        raise UsageError(f"evaluate scores one --target (topK, a class index or a name); received {len(texts)}")
    spec = opt.model_spec(args)
    if spec is not None and spec.class_names:
        opt.parse_targets(texts, spec.class_names, len(spec.class_names), debug=args.debug)
    model, spec = opt.load_model_from_args(args)
    print(opt.describe_model(args, model, spec), flush=True)
    ((kind, value),) = opt.parse_targets(texts, spec.class_names, len(spec.class_names), debug=args.debug).parts
    target = f"top{value}" if kind == "top" else int(value)
    plan = opt.read_option_files(with_model_defaults(plan, spec), spec)

    settings = {
        "model": planning.model_fingerprint(args.model, args.weights),
        "methods": [list(p) for p in plan],
        "metrics": metrics,
        "target": texts[0],
        "seed": seed,
        "mask_suffix": args.mask_suffix,
        "metric_options": {m: CLI_METRIC_OPTIONS[m] for m in metrics if m in CLI_METRIC_OPTIONS},
    }
    parts = os.path.join(args.out, PARTS)
    os.makedirs(parts, exist_ok=True)
    remove_partials(parts)
    try:
        _check_settings(args.out, settings)
    except planning.RunRefused as error:
        raise UsageError(str(error)) from error
    todo = [p for p in images if not (args.resume and os.path.isfile(os.path.join(parts, _part_name(p))))]
    methods = [name for name, _ in plan]
    method_options = {name: options for name, options in plan}
    progress = Progress(len(todo) * (len(methods) + 1) * len(metrics), name="saliency evaluate", unit="cells")
    failed = []
    preflighted = False
    for path in todo:
        try:
            x, _ = load_image(path, spec)
        except ImageLoadError as error:
            failed.append(path)
            print(f"saliency evaluate: skipped {path}: {opt.message(error)}", file=sys.stderr, flush=True)
            progress.update(0, (len(methods) + 1) * len(metrics))
            continue
        if not preflighted:
            opt.preflight(model, spec, x[None], plan, args.batch_size)
            preflighted = True
        mask_file = masks_found[path]
        mask = load_mask(mask_file, x.shape[:2])[None] if mask_file else None
        chosen = [m for m in metrics if mask is not None or not registry.get(m).needs_masks]
        table = compare(
            model,
            x[None],
            methods,
            chosen,
            targets=target,
            masks=mask,
            seed=seed,
            batch_size=args.batch_size,
            method_options=method_options,
            metric_options={m: CLI_METRIC_OPTIONS.get(m, {}) for m in chosen},
            progress=lambda *_: progress.update(1),
        )
        if len(chosen) < len(metrics):  # the cells of the metrics this image has no mask for
            progress.update((len(methods) + 1) * (len(metrics) - len(chosen)))
        values = {f"{r['method']}\t{r['metric']}": r["per_input"][0] for r in table["rows"]}
        write_json({"image": os.path.abspath(path), "values": values}, os.path.join(parts, _part_name(path)))
    progress.close()

    done = [p for p in images if os.path.isfile(os.path.join(parts, _part_name(p)))]
    if not done:
        print("saliency evaluate: no image could be scored", file=sys.stderr)
        return 1
    table = collect(parts, done, [*methods, "random"], metrics)
    written = write_table(args.out, table, settings)
    if os.path.isfile(os.path.join(args.out, "index.html")):  # a batch run's gallery: rebuilt to link the table
        write_gallery(args.out)
    for path in written:
        print(path)
    print(format_table(table))
    return 1 if failed else 0


def _check_settings(out_dir: str, settings: dict) -> None:
    """The run's settings recorded in ``out_dir/metrics_settings.json``, or checked against those
    recorded there (another run in the same folder is refused)."""

    settings = json.loads(json.dumps(settings))
    path = os.path.join(out_dir, SETTINGS)
    with planning.locked(out_dir):
        before = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                try:
                    before = json.load(handle)
                except ValueError:
                    before = None
        if before is not None and before != settings:
            changed = ", ".join(k for k in settings if before.get(k) != settings[k]) or "settings"
            raise planning.RunRefused(
                f"--out {out_dir!r} holds metrics made with other settings ({changed} "
                f"differ; see {path}); use the same options, or another --out"
            )
        if before is None:
            write_json(settings, path)


def collect(parts: str, images: list[str], methods: list[str], metrics: list[str]) -> dict:
    """The table of every scored image: ``{"images", "rows": [{method, metric, mean, std, per_input,
    higher_is_better}]}`` (``per_input`` in the order of ``images``; NaN where a metric has no value)."""

    from ..evaluate import registry

    per_image = []
    for image in images:
        with open(os.path.join(parts, _part_name(image)), encoding="utf-8") as handle:
            per_image.append(json.load(handle)["values"])
    rows = []
    for metric in metrics:
        for method in methods:
            values = np.array(
                [
                    v.get(f"{method}\t{metric}", np.nan) if v.get(f"{method}\t{metric}") is not None else np.nan
                    for v in per_image
                ],
                dtype=np.float64,
            )
            finite = values[np.isfinite(values)]
            rows.append(
                {
                    "method": method,
                    "metric": metric,
                    "mean": float(finite.mean()) if finite.size else float("nan"),
                    "std": float(finite.std()) if finite.size else float("nan"),
                    "per_input": [float(v) for v in values],
                    "higher_is_better": registry.get(metric).higher_is_better,
                }
            )
    return {"images": [os.path.abspath(p) for p in images], "rows": rows}


def write_table(out: str, table: dict, settings: dict) -> list[str]:
    """``metrics.csv``, ``metrics.json`` and ``metrics.png`` in ``out`` (each written atomically)."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["method", "metric", "image", "value", "higher_is_better"])
    for row in table["rows"]:
        for image, value in zip(table["images"], row["per_input"]):
            writer.writerow(
                [row["method"], row["metric"], image, "" if np.isnan(value) else repr(value), row["higher_is_better"]]
            )
    paths = [
        write_atomic(os.path.join(out, "metrics.csv"), text.getvalue().encode()),
        write_json({"settings": settings, "caveats": CAVEATS, **table}, os.path.join(out, "metrics.json")),
    ]
    png = os.path.join(out, "metrics.png")
    save_png(metrics_figure(table), png, dpi=100)
    return [*paths, png]


def format_table(table: dict) -> str:
    """The table as text: one line per method, one column per metric, each cell the method's mean
    over the images (``n/a`` where the metric has no value), as ``metrics.json`` holds it."""
    metrics = list(dict.fromkeys(r["metric"] for r in table["rows"]))
    methods = list(dict.fromkeys(r["method"] for r in table["rows"]))
    means = {(r["method"], r["metric"]): r["mean"] for r in table["rows"]}
    better = {r["metric"]: "higher" if r["higher_is_better"] else "lower" for r in table["rows"]}
    header = ["method", *(f"{m} ({better[m]} is better)" for m in metrics)]
    lines = [[name, *(_format_value(means[name, m]) for m in metrics)] for name in methods]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    title = f"mean over {len(table['images'])} image{'s' if len(table['images']) != 1 else ''}:"
    return "\n".join(
        [title, *("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header, *lines])]
    )


def _format_value(value: float) -> str:
    """A mean as the table prints it: four significant digits, ``n/a`` for NaN."""
    return "n/a" if np.isnan(value) else f"{value:.4g}"


def metrics_figure(table: dict) -> Figure:
    """One panel per metric: methods ranked best first (by their mean), one dot per image, the mean
    as a bar; the ``random`` row drawn grey."""
    from matplotlib.figure import Figure

    metrics = list(dict.fromkeys(r["metric"] for r in table["rows"]))
    columns = min(3, len(metrics))
    rows_of_panels = -(-len(metrics) // columns)
    methods = list(dict.fromkeys(r["method"] for r in table["rows"]))
    height = max(2.2, 0.35 * len(methods) + 1.0)
    fig = Figure(figsize=(4.2 * columns, height * rows_of_panels), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows_of_panels, columns, squeeze=False).ravel())
    for ax, metric in zip(axes, metrics):
        rows = [r for r in table["rows"] if r["metric"] == metric]
        better = rows[0]["higher_is_better"]
        rows.sort(key=lambda r: (np.isnan(r["mean"]), -r["mean"] if better else r["mean"]))
        for position, row in enumerate(rows):
            colour = "0.6" if row["method"] == "random" else "C0"
            y = len(rows) - 1 - position
            if np.isfinite(row["mean"]):
                ax.barh(y, row["mean"], color=colour, alpha=0.35, height=0.6)
            values = np.asarray(row["per_input"], dtype=float)
            jitter = np.linspace(-0.2, 0.2, len(values)) if len(values) > 1 else np.zeros(1)
            ax.plot(values, y + jitter, "o", color=colour, markersize=3)
        ax.set_yticks(range(len(rows)), [r["method"] for r in reversed(rows)], fontsize=8)
        ax.set_title(f"{metric} ({'higher' if better else 'lower'} is better)", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.axvline(0, color="0.8", linewidth=0.5)
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    fig.suptitle(
        f"saliency evaluate: {len(table['images'])} images, methods ranked best first (bar: mean, dots: images)",
        fontsize=10,
    )
    return fig
