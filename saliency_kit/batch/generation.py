"""Generated text in a run's output folder, where the gallery shows it beside images and texts.

``saliency explain-text --out DIR`` (and :func:`write_generation_outputs` from the library) writes
an :func:`saliency_kit.explain_generation` explanation as the other outputs are written: one file
per prompt, one manifest line, the gallery rebuilt::

    expl = sk.explain_generation(lm, "The capital of France is", max_new_tokens=8)
    write_generation_outputs("text_out", expl, name="The capital of France is")
    # text_out/The_capital_of_France_is/integrated_gradients-generation.json; manifest.jsonl; index.html

A file holds ``{"method", "merge", "generated", "rows": [str], "columns": [str], "values": [[float
or null]]}``: the ``[generated × source]`` matrix of :func:`saliency_kit.render.generation.word_matrix`
(rows the generated tokens or words, columns the sequence's, ``null`` where a row's own token or
its future would be). Its manifest line is an image's with ``"kind": "generation"``, the prompt's
name as ``"image"``, the generated text as ``"class_name"`` and the sum of the generated tokens'
log-probabilities as ``"score"``. The gallery draws the matrix with escaped labels on a diverging
scale (:mod:`saliency_kit.batch.gallery`).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import numpy as np

from ..files import write_atomic
from ..render.generation import word_matrix
from .gallery import write_gallery
from .outputs import MANIFEST, Manifest, explain_dirs, inside, safe_name

__all__ = ["write_generation_outputs", "SUFFIX"]

SUFFIX = "-generation.json"


def write_generation_outputs(
    out_dir: str | os.PathLike, explanation: Any, *, name: str, merge: str = "tokens", gallery: bool = True
) -> list[pathlib.Path]:
    """Write ``explanation`` (of generated text, one sequence) into ``out_dir`` (created if
    needed) under ``name`` (the card's title, e.g. the prompt); return the paths written: the
    matrix's file and the gallery (``out_dir/index.html``; with ``gallery=False``, the
    manifest). ``merge``: ``"tokens"`` or ``"words"``
    (:func:`saliency_kit.render.generation.word_matrix`). Writing the same name and method again
    replaces its earlier output in the manifest; other names and methods are kept."""
    rows, columns, values, hidden = word_matrix(explanation, merge)
    if not np.all(np.isfinite(values)):
        raise ValueError("the generation maps must be finite to be written; received NaN or infinite values.")
    out = os.path.realpath(os.fspath(out_dir))
    os.makedirs(out, exist_ok=True)
    manifest = Manifest(os.path.join(out, MANIFEST))
    earlier = manifest.read()
    folders = {r["image"]: str(r.get("file", "")).split("/")[0] for r in earlier if isinstance(r.get("file"), str)}
    folder = folders.get(name) or explain_dirs([name], {f for image, f in folders.items() if image != name})[name]
    relative = f"{folder}/{safe_name(explanation.method, limit=60)}{SUFFIX}"
    path = os.path.join(out, relative)
    if not inside(out, path):
        raise PermissionError(f"refusing to write {path!r}: it resolves outside the output folder.")
    generated = "".join(rows)
    content = {
        "method": explanation.method,
        "merge": merge,
        "generated": generated,
        "rows": rows,
        "columns": columns,
        "values": [[None if h else float(v) for v, h in zip(row, gone)] for row, gone in zip(values, hidden)],
    }
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, json.dumps(content, ensure_ascii=False).encode("utf-8"))
    scores = getattr(explanation, "scores", None)
    record = {
        "image": name,
        "status": "ok",
        "method": explanation.method,
        "class": None,
        "class_name": generated,
        "score": None if scores is None else float(np.sum(np.asarray(scores, np.float64)[0])),
        "kind": "generation",
        "file": relative,
        "outputs": 1,
    }
    others = [r for r in earlier if r["image"] == name and r.get("file") != relative]  # other methods kept
    manifest.replace_images([*others, record])
    given = pathlib.Path(out_dir)  # the paths returned as the caller named the folder
    return [given / relative, write_gallery(given) if gallery else given / MANIFEST]
