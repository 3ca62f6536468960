"""A static HTML gallery of a run: ``index.html`` beside the outputs, built from the manifest alone.

    from saliency_kit.batch.gallery import write_gallery
    write_gallery("saliency_out")      # -> Path("saliency_out/index.html")

The page is self-contained (inline CSS and JavaScript, no server, no network) and links the images
by relative paths, so the folder can be zipped, copied or opened from disk. It shows one card per
input image with its overlays (or heatmaps) in a table of methods by classes, filterable by class
name, method and image name, sortable by score, and paged so that a run of thousands of images
stays quick: only one page of cards exists in the document at a time, and its images load lazily.

Everything on the page comes from ``manifest*.jsonl`` (``manifest.jsonl`` and the per-shard
``manifest.shard-I-of-N.jsonl``) and the files it names, so rebuilding after ``--resume`` gives the
complete run. A manifest line looks like (see :mod:`saliency_kit.batch`)::

    {"image": "cats/tom.png", "status": "ok", "method": "gradcam", "class": 3, "class_name": "cat",
     "score": 7.1, "kind": "overlay", "file": "cats/tom/gradcam-c3-cat-overlay.png", "outputs": 6}
    {"image": "bad.png", "status": "failed", "error": "cannot identify image file"}

Files named by the manifest that are missing (or outside the output folder) are left out and
counted on the page. The data is embedded as JSON and put into the page with DOM text nodes only,
so names with quotes, ``<``, ``&`` or any Unicode are shown as they are and never parsed as HTML.
"""
from __future__ import annotations

import glob
import html
import json
import os
import pathlib
import posixpath
import re

__all__ = ["write_gallery", "gallery_data", "read_manifests"]

INDEX = "index.html"
_KINDS = ("overlay", "heatmap", "npz")  # the manifest's "kind" of each file the page links


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
                self.listings[folder] = frozenset(
                    e.name for e in os.scandir(path) if e.is_file()) if inside else frozenset()
            except OSError:
                self.listings[folder] = frozenset()
        return name in self.listings[folder]


def gallery_data(out_dir: str | os.PathLike) -> dict:
    """What the page shows, as plain JSON-able data.

    ``{"images": [{"image", "outputs": [{"method", "class", "class_name", "score", "overlay",
    "heatmap", "npz"} (+ ``"subject"``: the region or box a map explains, e.g. ``"box2"``)]}], "methods": [{"name", "title"}], "classes": [names], "failed":
    [{"image", "error"}], "missing": int}``. Images keep the order of their first manifest line;
    an output recorded twice (a resumed run) counts once. An image that failed and later
    succeeded (a retry) counts as succeeded.
    """
    from ..render import method_title

    out_root = os.path.realpath(os.fspath(out_dir))
    images: dict[str, dict[tuple, dict]] = {}
    failed: dict[str, str] = {}
    methods: dict[str, None] = {}
    classes: dict[str, None] = {}
    seen_files: set[str] = set()
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
        if file not in files:  # also any file name that is not a string
            missing += 1
            continue
        seen_files.add(file)
        method = str(record.get("method", ""))
        target = record.get("class")
        target = target if isinstance(target, (int, str)) or target is None else str(target)
        class_name = str(record.get("class_name", target))
        subject = record.get("target")
        subject = str(subject) if subject is not None else None
        output = images.setdefault(image, {}).setdefault((method, target, class_name, subject), {
            "method": method, "class": target, "class_name": class_name, "score": _number(record.get("score")),
            **({"subject": subject} if subject else {}),
        })
        output[kind] = file
        classes.setdefault(class_name, None)
    # The page depends on what the manifests say, not on the order their lines were written in
    # (workers of a sharded or Ray run finish in any order): images by path, failures likewise,
    # methods in the order the first image shows them.
    images = {image: images[image] for image in sorted(images)}
    failed = {image: failed[image] for image in sorted(failed)}
    for outputs in images.values():
        for output in outputs.values():
            methods.setdefault(output["method"], None)
    return {
        "images": [{"image": image, "outputs": list(outputs.values())} for image, outputs in images.items()],
        "methods": [{"name": m, "title": method_title(m)} for m in methods],
        "classes": sorted(classes, key=str.casefold),
        "failed": [{"image": i, "error": e} for i, e in failed.items() if i not in images],
        "missing": missing,
    }


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _script_json(data) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _packed(data: dict) -> dict:
    """``data`` in the compact form the page unpacks (a run of 10,000 images is megabytes of it).

    Each image is ``[name, folder, outputs]`` and each output ``[method index, class, class-name
    index, score, files]`` (then its subject, when it has one); ``files`` is ``[stem, kinds]`` when the names follow the batch naming
    (``<stem>-overlay.png``, ``<stem>-heatmap.png``, ``<stem>.npz``; ``kinds`` is a bit mask 1, 2,
    4), else ``{kind: name}``. Names are relative to ``folder``.
    """
    method_index = {m["name"]: i for i, m in enumerate(data["methods"])}
    class_index = {name: i for i, name in enumerate(data["classes"])}
    suffixes = (("overlay", "-overlay.png", 1), ("heatmap", "-heatmap.png", 2), ("npz", ".npz", 4))
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
            stems = {name[: -len(suffix)] for k, suffix, _ in suffixes if k in names
                     for name in [names[k]] if name.endswith(suffix)}
            if len(stems) == 1 and all(names[k].endswith(suffix) for k, suffix, _ in suffixes if k in names):
                files = [stems.pop(), sum(bit for k, _, bit in suffixes if k in names)]
            else:
                files = names
            outputs.append([method_index[o["method"]], o["class"], class_index[o["class_name"]], o["score"], files,
                            *([o["subject"]] if o.get("subject") else [])])
        images.append([entry["image"], folder, outputs])
    return {**data, "images": images}


def render_html(data: dict, *, title: str = "Saliency maps", page_size: int = 40) -> str:
    """The page for ``data`` (see :func:`gallery_data`)."""
    fields = {"title": html.escape(title), "page_size": str(int(page_size)), "data": _script_json(_packed(data))}
    return re.sub(r"\{\{(\w+)\}\}", lambda match: fields[match.group(1)], _PAGE)


def write_gallery(out_dir: str | os.PathLike, *, title: str | None = None, page_size: int = 40) -> pathlib.Path:
    """Write ``out_dir/index.html`` (atomically) from ``out_dir``'s manifests; return its path.

    ``title`` defaults to ``"Saliency maps: <folder name>"``; ``page_size`` is how many image cards
    a page shows at first (the reader can change it). Safe to call again at any time, e.g. after a
    resumed run: the page is rebuilt from the whole manifest.
    """
    from ..render import write_atomic

    out = pathlib.Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"write_gallery() needs an existing output folder; received {os.fspath(out_dir)!r}.")
    if title is None:
        title = f"Saliency maps: {out.resolve().name}"
    page = render_html(gallery_data(out), title=title, page_size=page_size)
    path = out / INDEX
    write_atomic(path, page.encode("utf-8"), durable=False)
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{title}}</title>
<style>
:root { --fg: #1d1d1f; --muted: #6e6e73; --line: #d2d2d7; --bg: #f5f5f7; --accent: #0b63ce; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid var(--line); padding: 10px 16px; }
h1 { font-size: 17px; margin: 0 0 8px; }
.controls { display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: center; }
.controls label { color: var(--muted); }
.controls input[type=search] { width: 13em; padding: 3px 6px; }
.methods label { color: var(--fg); margin-right: 8px; white-space: nowrap; }
.pager { display: flex; gap: 8px; align-items: center; }
.pager button { padding: 2px 10px; }
#summary { color: var(--muted); margin-top: 6px; }
main { padding: 12px 16px; display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 8px 10px; min-width: 0; }
.card h2 { font-size: 13px; margin: 0 0 6px; overflow-wrap: anywhere; font-weight: 600; }
.card table { border-collapse: collapse; }
.card th { font-size: 12px; font-weight: 600; text-align: left; padding: 0 8px 0 0; vertical-align: middle; white-space: nowrap; }
.card td { padding: 0 6px 6px 0; vertical-align: top; }
figure { margin: 0; width: 128px; }
figure img { width: 128px; height: auto; min-height: 32px; display: block; border-radius: 3px; background: #eee; image-rendering: auto; }
figcaption { font-size: 11px; color: var(--muted); overflow-wrap: anywhere; }
figcaption b { color: var(--fg); font-weight: 600; }
.none { color: var(--muted); padding: 20px; }
details { margin: 0 16px 16px; }
details li { overflow-wrap: anywhere; }
</style>
</head>
<body>
<header>
<h1>{{title}}</h1>
<div class="controls">
  <span><label for="class-filter">Class</label> <input type="search" id="class-filter" list="class-names" placeholder="any class"></span>
  <datalist id="class-names"></datalist>
  <span><label for="image-filter">Image</label> <input type="search" id="image-filter" placeholder="any file name"></span>
  <span class="methods" id="methods"></span>
  <span><label for="show">Show</label> <select id="show"><option value="overlay">overlays</option><option value="heatmap">heatmaps</option></select></span>
  <span><label for="sort">Sort</label> <select id="sort">
    <option value="score-desc">score, highest first</option>
    <option value="score-asc">score, lowest first</option>
    <option value="name">image name</option>
    <option value="run">run order</option>
  </select></span>
  <span class="pager"><button id="prev" type="button">&#8592; Prev</button><span id="page-info"></span><button id="next" type="button">Next &#8594;</button>
    <select id="page-size"><option value="20">20</option><option value="40">40</option><option value="100">100</option><option value="200">200</option></select> per page</span>
</div>
<div id="summary"></div>
</header>
<main id="cards"></main>
<details id="failed-box" hidden><summary id="failed-title"></summary><ul id="failed"></ul></details>
<noscript><p class="none">This gallery needs JavaScript to show the images.</p></noscript>
<script type="application/json" id="gallery-data">{{data}}</script>
<script>
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("gallery-data").textContent);
  const KINDS = [["overlay", "-overlay.png", 1], ["heatmap", "-heatmap.png", 2], ["npz", ".npz", 4]];
  data.images = data.images.map(([image, folder, outputs]) => ({
    image,
    outputs: outputs.map(([m, cls, name, score, files, subject]) => {
      const o = { method: data.methods[m].name, class: cls, class_name: data.classes[name], score,
                  subject: subject || "" };
      const prefix = folder ? folder + "/" : "";
      for (const [kind, suffix, bit] of KINDS) {
        if (Array.isArray(files)) { if (files[1] & bit) o[kind] = prefix + files[0] + suffix; }
        else if (files[kind]) o[kind] = prefix + files[kind];
      }
      return o;
    }),
  }));
  const $ = (id) => document.getElementById(id);
  const el = (tag, props, children) => {
    const node = document.createElement(tag);
    Object.assign(node, props || {});
    for (const child of children || []) node.append(child);
    return node;
  };
  const url = (file) => file.split("/").map(encodeURIComponent).join("/");
  const titles = new Map(data.methods.map((m) => [m.name, m.title]));
  const state = { page: 0, pageSize: {{page_size}} };

  for (const name of data.classes) $("class-names").append(el("option", { value: name }));
  for (const m of data.methods) {
    const box = el("input", { type: "checkbox", checked: true, value: m.name });
    box.addEventListener("change", () => { state.page = 0; update(); });
    $("methods").append(el("label", {}, [box, " " + m.title]));
  }
  const sizes = Array.from($("page-size").options).map((o) => +o.value);
  if (!sizes.includes(state.pageSize)) $("page-size").append(el("option", { value: String(state.pageSize), textContent: String(state.pageSize) }));
  $("page-size").value = String(state.pageSize);

  function selection() {
    const cls = $("class-filter").value.trim().toLowerCase();
    const img = $("image-filter").value.trim().toLowerCase();
    const methods = new Set(Array.from($("methods").querySelectorAll("input:checked")).map((b) => b.value));
    const cards = [];
    data.images.forEach((entry, order) => {
      if (img && !entry.image.toLowerCase().includes(img)) return;
      const outputs = entry.outputs.filter((o) => methods.has(o.method) &&
        (!cls || o.class_name.toLowerCase().includes(cls)));
      if (!outputs.length) return;
      let best = null;
      for (const o of outputs) if (o.score !== null && (best === null || o.score > best)) best = o.score;
      cards.push({ entry, outputs, best, order });
    });
    const sort = $("sort").value;
    const missing = (v, low) => (v === null ? (low ? Infinity : -Infinity) : v);
    if (sort === "score-desc") cards.sort((a, b) => missing(b.best, false) - missing(a.best, false) || a.order - b.order);
    else if (sort === "score-asc") cards.sort((a, b) => missing(a.best, true) - missing(b.best, true) || a.order - b.order);
    else if (sort === "name") cards.sort((a, b) => a.entry.image.localeCompare(b.entry.image) || a.order - b.order);
    return cards;
  }

  function figure(o, show) {
    const file = o[show] || o.overlay || o.heatmap;
    const caption = el("figcaption", {}, [el("b", { textContent: o.class_name }),
      (o.subject ? " " + o.subject : "") + " " + (o.score === null ? "" : o.score.toPrecision(3))]);
    if (!file) {
      const link = o.npz ? el("a", { href: url(o.npz), textContent: "npz" }) : "no image";
      return el("figure", {}, [link, caption]);
    }
    const img = el("img", { loading: "lazy", decoding: "async", src: url(file),
      alt: titles.get(o.method) + ", " + o.class_name + (o.subject ? " " + o.subject : "") });
    return el("figure", {}, [el("a", { href: url(file) }, [img]), caption]);
  }

  function card(item, show) {
    const byMethod = new Map();
    for (const o of item.outputs) {
      if (!byMethod.has(o.method)) byMethod.set(o.method, []);
      byMethod.get(o.method).push(o);
    }
    const rows = [];
    for (const [method, outputs] of byMethod) {
      rows.push(el("tr", {}, [el("th", { textContent: titles.get(method) }),
        ...outputs.map((o) => el("td", {}, [figure(o, show)]))]));
    }
    const node = el("section", { className: "card" }, [el("h2", { textContent: item.entry.image }),
      el("table", {}, [el("tbody", {}, rows)])]);
    node.dataset.score = item.best === null ? "" : String(item.best);
    node.dataset.image = item.entry.image;
    return node;
  }

  function update() {
    const cards = selection();
    const pages = Math.max(1, Math.ceil(cards.length / state.pageSize));
    state.page = Math.min(Math.max(state.page, 0), pages - 1);
    const shown = cards.slice(state.page * state.pageSize, (state.page + 1) * state.pageSize);
    const show = $("show").value;
    $("cards").replaceChildren(...(shown.length ? shown.map((c) => card(c, show))
      : [el("p", { className: "none", textContent: "No image matches these filters." })]));
    $("page-info").textContent = "page " + (state.page + 1) + " of " + pages;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
    const parts = [cards.length + " of " + data.images.length + " images"];
    if (data.failed.length) parts.push(data.failed.length + " failed");
    if (data.missing) parts.push(data.missing + " files named in the manifest are missing");
    $("summary").textContent = parts.join(" \\u00b7 ");
  }

  if (data.failed.length) {
    $("failed-box").hidden = false;
    $("failed-title").textContent = data.failed.length + " images could not be explained";
    for (const f of data.failed) $("failed").append(el("li", {}, [el("b", { textContent: f.image }), ": " + f.error]));
  }
  const again = () => { state.page = 0; update(); };
  $("class-filter").addEventListener("input", again);
  $("image-filter").addEventListener("input", again);
  $("sort").addEventListener("change", again);
  $("show").addEventListener("change", update);
  $("page-size").addEventListener("change", () => { state.pageSize = +$("page-size").value; again(); });
  $("prev").addEventListener("click", () => { state.page -= 1; update(); window.scrollTo(0, 0); });
  $("next").addEventListener("click", () => { state.page += 1; update(); window.scrollTo(0, 0); });
  update();
})();
</script>
</body>
</html>
"""
