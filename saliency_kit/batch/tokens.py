"""Token explanations in a run's output folder, where the gallery shows them beside images.

``saliency explain`` and ``saliency batch`` read images; an explanation of token ids (a text
classifier explained at its embedding, maps ``[B, K, T]``) comes from the library, and this
writes it into an output folder as they write theirs: one file per text and target, one
manifest line per file, and the gallery rebuilt::

    expl = sk.explain(classifier, {"token_ids": ids, "padding_mask": mask}, "integrated_gradients", "top1")
    write_token_outputs("text_out", expl, tokens, names=["review 1", "review 2"], class_names=["neg", "pos"])
    # text_out/review_1/integrated_gradients-c1-pos-tokens.json, ...; manifest.jsonl; index.html

A file holds ``{"method", "class", "class_name", "score", "tokens": [str], "values": [float]}``
(one value per token, the map's); its manifest line is an image's with ``"kind": "tokens"`` and
the text's name as ``"image"``. The gallery draws each as escaped token spans coloured on a
diverging scale, with a legend (:mod:`saliency_kit.batch.gallery`).
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..files import write_atomic
from ..render import check_tokens
from .gallery import write_gallery
from .outputs import MANIFEST, Manifest, class_name_of, explain_dirs, inside, output_name

__all__ = ["write_token_outputs", "token_file_name", "SUFFIX"]

SUFFIX = "-tokens.json"


def token_file_name(method: str, target: int, class_name: str) -> str:
    """``integrated_gradients-c1-pos-tokens.json``: the names of the other outputs, with ``-tokens.json``."""
    return output_name(method, target, class_name, "npz").removesuffix(".npz") + SUFFIX


def write_token_outputs(
    out_dir: str | os.PathLike,
    explanation: Any,
    tokens: Any,
    *,
    names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    gallery: bool = True,
) -> pathlib.Path:
    """Write ``explanation``'s token maps into ``out_dir`` (created if needed) and return the
    gallery's path (``out_dir/index.html``; with ``gallery=False``, the manifest's).

    ``explanation``: maps ``[B, K, T]`` of token ids (its token input's, when several inputs were
    explained); ``tokens``: a list of str per input, at most ``T`` each (as
    :func:`saliency_kit.render.tokens_html`); ``names``: one distinct name per input (default
    ``"text 0"``, ``"text 1"``, ...), shown on its card and naming its folder. Writing the same
    names again replaces their earlier outputs in the manifest.
    """
    maps = np.asarray(getattr(explanation, "token_maps", explanation.maps))
    rows = check_tokens(tokens, maps.shape)
    count = maps.shape[0]
    names = [f"text {b}" for b in range(count)] if names is None else [str(n) for n in names]
    if len(names) != count or len(set(names)) != count:
        raise ValueError(f"names must be {count} distinct names, one per input; received {len(names)} ({names[:4]}).")
    if not np.all(np.isfinite(maps)):
        raise ValueError("the token maps must be finite to be written; received NaN or infinite values.")
    out = os.path.realpath(os.fspath(out_dir))
    os.makedirs(out, exist_ok=True)
    targets = np.asarray(explanation.targets)
    scores = None if explanation.scores is None else np.asarray(explanation.scores, np.float64)
    folders = explain_dirs(names)
    lines = []
    for b, (name, row) in enumerate(zip(names, rows)):
        written: list[dict] = []
        for k in range(maps.shape[1]):
            target = int(targets[b, k])
            class_name = class_name_of(class_names, target)
            relative = f"{folders[name]}/{token_file_name(explanation.method, target, class_name)}"
            if any(line["file"] == relative for line in written):
                continue  # a class asked twice
            path = os.path.join(out, relative)
            if not inside(out, path):
                raise PermissionError(f"refusing to write {path!r}: it resolves outside the output folder.")
            score = None if scores is None else float(scores[b, k])
            content = {
                "method": explanation.method,
                "class": target,
                "class_name": class_name,
                "score": score,
                "tokens": row,
                "values": [float(v) for v in maps[b, k, : len(row)]],
            }
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomic(path, json.dumps(content, ensure_ascii=False).encode("utf-8"))
            written.append(
                {
                    "image": name,
                    "status": "ok",
                    "method": explanation.method,
                    "class": target,
                    "class_name": class_name,
                    "score": score,
                    "kind": "tokens",
                    "file": relative,
                }
            )
        lines += [{**line, "outputs": len(written)} for line in written]
    manifest = os.path.join(out, MANIFEST)
    Manifest(manifest).replace_images(lines)
    return write_gallery(out) if gallery else pathlib.Path(manifest)
