"""What the gallery reads of ``saliency evaluate --out``'s ``metrics.json``: each image's value of
each metric for each method, so that the page can sort its cards by a metric.

``saliency evaluate`` (:mod:`saliency_kit.cli.evaluate`) writes ``metrics.json`` with the images
it scored as absolute paths and one row per method and metric (``per_input``, in the order of the
images; ``null`` where the metric has no value; ``higher_is_better``). A gallery image (its path
relative to the batch's input folder, e.g. ``cats/tom.png``) takes the values of the scored image
whose path ends with it, component by component; when several do (two inputs folders holding
``cats/tom.png``), or none, it has none. Methods the gallery does not show (the ``random``
baseline) are left out. A file that is not what ``saliency evaluate`` writes gives no metrics.
"""

from __future__ import annotations

import json
import math
import os

__all__ = ["METRICS_JSON", "metric_values"]

METRICS_JSON = "metrics.json"


def metric_values(out_root: str, images: list[str], methods: list[str]) -> dict:
    """``{"metrics": [{"name", "higher_is_better"}], "values": [[[metric index, method index,
    value], ...] per image of ``images``]}`` from ``out_root/metrics.json``; empty lists when the
    file is absent or not what ``saliency evaluate`` writes."""
    empty: dict[str, list] = {"metrics": [], "values": [[] for _ in images]}
    try:
        with open(os.path.join(out_root, METRICS_JSON), "rb") as handle:
            content = json.loads(handle.read())
        scored = [str(p).replace(os.sep, "/") for p in content["images"]]
        rows = [r for r in content["rows"] if isinstance(r, dict) and len(r["per_input"]) == len(scored)]
    except (OSError, ValueError, KeyError, TypeError):
        return empty
    by_base: dict[str, list[int]] = {}
    for i, path in enumerate(scored):
        by_base.setdefault(path.rsplit("/", 1)[-1], []).append(i)
    method_index = {m: i for i, m in enumerate(methods)}
    names: dict[str, bool] = {}
    for row in rows:
        if row.get("method") in method_index and isinstance(row.get("metric"), str):
            names.setdefault(row["metric"], bool(row.get("higher_is_better", True)))
    metric_index = {m: i for i, m in enumerate(names)}
    values = []
    for image in images:
        matches = [i for i in by_base.get(image.rsplit("/", 1)[-1], []) if _ends_with(scored[i], image)]
        found = []
        if len(matches) == 1:
            (i,) = matches
            for row in rows:
                if row.get("method") in method_index and row.get("metric") in metric_index:
                    value = _number(row["per_input"][i])
                    if value is not None:
                        found.append([metric_index[row["metric"]], method_index[row["method"]], value])
        values.append(found)
    return {"metrics": [{"name": n, "higher_is_better": h} for n, h in names.items()], "values": values}


def _ends_with(path: str, image: str) -> bool:
    return path == image or path.endswith("/" + image)


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
