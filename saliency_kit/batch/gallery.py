"""A static HTML gallery of a run: ``index.html`` beside the outputs, built from the manifest alone.

    from saliency_kit.batch.gallery import write_gallery
    write_gallery("saliency_out")      # -> Path("saliency_out/index.html")

The page is self-contained (inline CSS and JavaScript, no server, no network) and links the images
by relative paths, so the folder can be zipped, copied or opened from disk. It shows one card per
input image with its maps in a table of methods by classes: each heatmap laid over the image's
photo (:mod:`.photos`) at the opacity of a slider, or the overlays blended at write time, or the
heatmaps alone. Cards are filtered by class name, method (each turned on and off) and image name,
sorted by score or by a ``saliency evaluate`` metric (:mod:`.gallery_metrics`), and paged so that a
run of thousands of images stays quick: only one page of cards exists in the document at a time,
and its images load lazily. One image's methods show side by side, larger; the keys (listed on
the page) walk the images across pages, open that view, turn methods on and off and fade the maps.
A text's token explanations (written by :func:`saliency_kit.batch.tokens.write_token_outputs`,
``"kind": "tokens"``) show in its card as its tokens coloured on a diverging scale, with a legend;
generated text (``saliency explain-text --out``, :func:`saliency_kit.batch.generation.write_generation_outputs`,
``"kind": "generation"``) as its ``[generated × source]`` matrix, the tokens as labels, on that scale.

Everything on the page comes from ``manifest*.jsonl`` (``manifest.jsonl`` and the per-shard
``manifest.shard-I-of-N.jsonl``) and the files it names, so rebuilding after ``--resume`` gives the
complete run. A manifest line looks like (see :mod:`saliency_kit.batch`)::

    {"image": "cats/tom.png", "status": "ok", "method": "gradcam", "class": 3, "class_name": "cat",
     "score": 7.1, "kind": "overlay", "file": "cats/tom/gradcam-c3-cat-overlay.png", "outputs": 6}
    {"image": "bad.png", "status": "failed", "error": "cannot identify image file"}

Files named by the manifest that are missing (or outside the output folder, or token files that
are not what :mod:`.tokens` writes) are left out and counted on the page. The data is embedded as
JSON and put into the page with DOM text nodes only, so names and tokens with quotes, ``<``, ``&``
or any Unicode are shown as they are and never parsed as HTML; the token colours are computed here
from the values, never read from a file.
"""

from __future__ import annotations

import glob
import html
import json
import os
import pathlib
import posixpath
import string
from importlib import resources
from typing import Any

import numpy as np

from ..files import write_atomic
from ..render import method_title
from ..render.sequences import legend_stops, token_colours
from .gallery_metrics import metric_values

__all__ = ["write_gallery", "gallery_data", "read_manifests", "render_html"]

INDEX = "index.html"
PAGE = "gallery.html"  # the page's HTML, CSS and JS, beside this module: $title, $page_size, $data
_KINDS = ("overlay", "heatmap", "npz", "tokens", "generation")  # the manifest's "kind" of each file linked
MAX_TOKENS = 100_000  # a token file (or a generation's matrix) larger than this is not shown


def read_manifests(out_dir: str | os.PathLike) -> list[dict]:
    """Every complete, valid line of ``out_dir``'s ``manifest*.jsonl`` files, in file order.

    A line cut off by a killed run (no final newline) or that is not a JSON object is skipped.
    """
    records: list[dict] = []
    for path in sorted(glob.glob(os.path.join(glob.escape(os.fspath(out_dir)), "manifest*.jsonl"))):
        with open(path, "rb") as handle:
            for raw in handle:
                if not raw.endswith(b"\n"):
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("image"), str):
                    records.append(record)
    return records


class _Files:
    """Which relative paths name a regular file inside the output folder (one listing per folder)."""

    def __init__(self, out_root: str):
        self.out_root = out_root
        self.listings: dict[str, frozenset] = {}

    def __contains__(self, relative) -> bool:
        if not isinstance(relative, str) or not relative or "\\" in relative or "\0" in relative:
            return False
        if relative.startswith("/") or posixpath.normpath(relative) != relative or relative.startswith(".."):
            return False  # absolute, or not in normal form (``a/../b``, ``./a``): never followed
        folder, name = posixpath.split(relative)
        if folder not in self.listings:
            path = os.path.join(self.out_root, folder)
            real = os.path.realpath(path)
            inside = real == self.out_root or real.startswith(self.out_root + os.sep)  # no symlink out
            try:
                self.listings[folder] = (
                    frozenset(e.name for e in os.scandir(path) if e.is_file()) if inside else frozenset()
                )
            except OSError:
                self.listings[folder] = frozenset()
        return name in self.listings[folder]


def gallery_data(out_dir: str | os.PathLike) -> dict:
    """What the page shows, as plain JSON-able data.

    ``{"images": [{"image", "outputs": [{"method", "class", "class_name", "score", "overlay",
    "heatmap", "npz", "tokens", "generation"} (+ ``"subject"``: the region or box a map explains,
    e.g. ``"box2"``; + ``"text"``: a token file's ``{"tokens", "values", "colours",
    "text_colours", "scale"}``, or a generation file's ``{"rows", "columns", "values",
    "colours", "text_colours", "scale"}``, each of the last three rows × columns, with
    ``null`` in the cells that explain nothing)]}], "methods": [{"name", "title"}], "classes":
    [names], "failed": [{"image", "error"}], "missing": int, "metrics": [file names],
    "metric_names": [{"name", "higher_is_better"}], "token_legend": [colours]}`` (each image also has
    ``"photo"``, the file under its heatmaps or None, and ``"metrics"``, its ``[metric index, method
    index, value]`` from ``metrics.json``; ``metrics`` lists the ``saliency evaluate`` table and chart
    when ``--out`` holds them; ``token_legend`` the diverging scale's colours when a token or
    generation output is there). Images keep the order of their first manifest line;
    an output recorded twice (a resumed run) counts once. An image that failed and later
    succeeded (a retry) counts as succeeded.
    """
    out_root = os.path.realpath(os.fspath(out_dir))
    images: dict[str, dict[tuple, dict]] = {}
    failed: dict[str, str] = {}
    methods: dict[str, None] = {}
    classes: dict[str, None] = {}
    seen_files: set[str] = set()
    photos: dict[str, str] = {}
    files = _Files(out_root)
    missing = 0
    for record in read_manifests(out_root):
        image = record["image"]
        if record.get("status") == "failed":
            failed[image] = str(record.get("error", ""))
            continue
        if record.get("status") != "ok":
            continue
        kind, file = record.get("kind"), record.get("file")
        if kind not in _KINDS or (isinstance(file, str) and file in seen_files):
            continue
        if not isinstance(file, str) or file not in files:  # also any file name that is not a string
            missing += 1
            continue
        view = _VIEWS.get(kind)
        text = view(os.path.join(out_root, file)) if view else None
        if view and text is None:
            missing += 1
            continue
        seen_files.add(file)
        photo = record.get("photo")
        if kind in ("overlay", "heatmap") and image not in photos and isinstance(photo, str) and photo in files:
            photos[image] = photo
        method = str(record.get("method", ""))
        target = record.get("class")
        target = target if isinstance(target, (int, str)) or target is None else str(target)
        class_name = str(record.get("class_name", target))
        subject = record.get("target")
        subject = str(subject) if subject is not None else None
        output = images.setdefault(image, {}).setdefault(
            (method, target, class_name, subject),
            {
                "method": method,
                "class": target,
                "class_name": class_name,
                "score": _number(record.get("score")),
                **({"subject": subject} if subject else {}),
            },
        )
        output[kind] = file
        if text is not None:
            output["text"] = text
        classes.setdefault(class_name, None)
    # The page depends on what the manifests say, not on the order their lines were written in
    # (workers of a sharded or Ray run finish in any order): images by path, failures likewise,
    # methods in the order the first image shows them.
    images = {image: images[image] for image in sorted(images)}
    failed = {image: failed[image] for image in sorted(failed)}
    for outputs in images.values():
        for output in outputs.values():
            methods.setdefault(output["method"], None)
    scored = metric_values(out_root, list(images), list(methods))
    return {
        "images": [
            {"image": image, "outputs": list(outputs.values()), "photo": photos.get(image), "metrics": values}
            for (image, outputs), values in zip(images.items(), scored["values"])
        ],
        "methods": [{"name": m, "title": method_title(m)} for m in methods],
        "metric_names": scored["metrics"],
        "classes": sorted(classes, key=str.casefold),
        "failed": [{"image": i, "error": e} for i, e in failed.items() if i not in images],
        "missing": missing,
        "metrics": [name for name in _METRICS_FILES if os.path.isfile(os.path.join(out_root, name))],
        "token_legend": legend_stops() if any("text" in o for e in images.values() for o in e.values()) else [],
    }


def _token_view(path: str) -> dict | None:
    """What the page shows of a token file: its tokens, their values and colours on one diverging
    scale (:func:`saliency_kit.render.sequences.token_colours`) and the scale's end; None for a
    file that is not a token file's JSON (one list of str and one of finite numbers, as long)."""
    try:
        with open(path, "rb") as handle:
            content = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    tokens = content.get("tokens") if isinstance(content, dict) else None
    values = content.get("values") if isinstance(content, dict) else None
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        return None
    if len(tokens) > MAX_TOKENS or not all(isinstance(t, str) for t in tokens):
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    numbers = np.asarray(values, np.float64)
    if not np.all(np.isfinite(numbers)):
        return None
    colours, text_colours, scale = token_colours(numbers)
    return {
        "tokens": tokens,
        "values": [float(f"{v:.4g}") for v in numbers],
        "colours": colours,
        "text_colours": text_colours,
        "scale": float(f"{scale:.3g}"),
    }


def _generation_view(path: str) -> dict | None:
    """What the page shows of a generation file (:mod:`saliency_kit.batch.generation`): its row
    and column labels, values and colours on one diverging scale (``null`` in the cells that
    explain nothing); None for a file that is not what the writer writes."""
    try:
        with open(path, "rb") as handle:
            content = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    if not isinstance(content, dict):
        return None
    rows, columns, values = content.get("rows"), content.get("columns"), content.get("values")
    if not isinstance(rows, list) or not isinstance(columns, list) or not isinstance(values, list):
        return None
    if not rows or len(values) != len(rows) or len(rows) * len(columns) > MAX_TOKENS:
        return None
    if not all(isinstance(t, str) for t in rows + columns):
        return None
    if not all(isinstance(r, list) and len(r) == len(columns) for r in values):
        return None
    cells = [v for row in values for v in row]
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in cells):
        return None
    shown = np.asarray([v for v in cells if v is not None], np.float64)
    if not shown.size or not np.all(np.isfinite(shown)):
        return None
    colours, text_colours, scale = token_colours(shown)
    order = iter(range(shown.size))
    index = [[None if v is None else next(order) for v in row] for row in values]

    def cells_of(per_cell: list) -> list:
        return [[None if i is None else per_cell[i] for i in row] for row in index]

    return {
        "rows": rows,
        "columns": columns,
        "values": cells_of([float(f"{v:.4g}") for v in shown]),
        "colours": cells_of(colours),
        "text_colours": cells_of(text_colours),
        "scale": float(f"{scale:.3g}"),
    }


_VIEWS = {"tokens": _token_view, "generation": _generation_view}
_METRICS_FILES = ("metrics.png", "metrics.csv", "metrics.json")  # written by `saliency evaluate`


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _script_json(data) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _packed(data: dict) -> dict:
    """``data`` in the compact form the page unpacks (a run of 10,000 images is megabytes of it).

    Each image is ``[name, folder, outputs]`` and each output ``[method index, class, class-name
    index, score, files]`` (then its subject, when it has one or a text follows, and its text,
    when it has one); ``files`` is ``[stem, kinds]`` when the names follow the batch naming
    (``<stem>-overlay.png``, ``<stem>-heatmap.png``, ``<stem>.npz``, ``<stem>-tokens.json``;
    ``kinds`` is a bit mask 1, 2, 4, 8), else ``{kind: name}``. Names are relative to ``folder``.
    """
    method_index = {m["name"]: i for i, m in enumerate(data["methods"])}
    class_index = {name: i for i, name in enumerate(data["classes"])}
    suffixes = (
        ("overlay", "-overlay.png", 1),
        ("heatmap", "-heatmap.png", 2),
        ("npz", ".npz", 4),
        ("tokens", "-tokens.json", 8),
        ("generation", "-generation.json", 16),
    )
    images = []
    for entry in data["images"]:
        paths = [o[k] for o in entry["outputs"] for k, _, _ in suffixes if o.get(k)]
        folder = posixpath.commonpath(paths) if len(paths) > 1 else posixpath.dirname(paths[0]) if paths else ""
        if folder in paths:  # one file: its folder, not itself
            folder = posixpath.dirname(folder)
        cut = len(folder) + 1 if folder else 0
        outputs = []
        for o in entry["outputs"]:
            names = {k: o[k][cut:] for k, _, _ in suffixes if o.get(k)}
            stems = {
                name[: -len(suffix)]
                for k, suffix, _ in suffixes
                if k in names
                for name in [names[k]]
                if name.endswith(suffix)
            }
            files: list[Any] | dict[str, Any]
            if len(stems) == 1 and all(names[k].endswith(suffix) for k, suffix, _ in suffixes if k in names):
                files = [stems.pop(), sum(bit for k, _, bit in suffixes if k in names)]
            else:
                files = names
            outputs.append(
                [
                    method_index[o["method"]],
                    o["class"],
                    class_index[o["class_name"]],
                    o["score"],
                    files,
                    *([o.get("subject") or ""] if o.get("subject") or o.get("text") else []),
                    *([o["text"]] if o.get("text") else []),
                ]
            )
        images.append([entry["image"], folder, outputs])
    return {
        **data,
        "images": images,
        "photos": [entry.get("photo") or "" for entry in data["images"]],
        "metric_values": [entry.get("metrics") or [] for entry in data["images"]],
    }


def render_html(data: dict, *, title: str = "Saliency maps", page_size: int = 40) -> str:
    """The page for ``data`` (see :func:`gallery_data`)."""
    page = string.Template(resources.files(__package__).joinpath(PAGE).read_text(encoding="utf-8"))
    return page.substitute(title=html.escape(title), page_size=str(int(page_size)), data=_script_json(_packed(data)))


def write_gallery(out_dir: str | os.PathLike, *, title: str | None = None, page_size: int = 40) -> pathlib.Path:
    """Write ``out_dir/index.html`` (atomically) from ``out_dir``'s manifests; return its path.

    ``title`` defaults to ``"Saliency maps: <folder name>"``; ``page_size`` is how many image cards
    a page shows at first (the reader can change it). Safe to call again at any time, e.g. after a
    resumed run: the page is rebuilt from the whole manifest.
    """
    out = pathlib.Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"write_gallery() needs an existing output folder; received {os.fspath(out_dir)!r}.")
    if title is None:
        title = f"Saliency maps: {out.resolve().name}"
    page = render_html(gallery_data(out), title=title, page_size=page_size)
    path = out / INDEX
    write_atomic(path, page.encode("utf-8"), durable=False)
    return path
