"""How much of a box's Grad-CAM and gradient map falls inside the box, per term of the box score.

Usage::

    python scripts/measure_box_scores.py

On the shipped detector ``shapes_det`` and the shipped scenes ``examples/scenes/scene*.png`` (found
again among the first scenes of seed 5 so that each shape's ground-truth box is known), every
ground-truth box is explained by the gradient and by Grad-CAM (at the ``features`` layer, written
here by hand with a tape) of one term of the default box score at a time::

    drise       max_j IoU(t, b_j) * o_j * p_j[c]      (the default)
    iou         IoU(t, b_j*)                           (o, p held constant)
    objectness  o_j*                                   (IoU, p held constant)
    class_prob  p_j*[c]                                (IoU, o held constant)
    class_logit z_j*[c]                                (the score="class" form)

with ``j*`` the proposal the D-RISE score picks. It prints the fraction of each map's mass (absolute
values for the gradient, the ReLU'd map for Grad-CAM) inside the ground-truth box, averaged over
the boxes, beside the boxes' mean area fraction. The ``default`` row is what a user gets: the
gradient and Grad-CAM through ``sk.explain`` with ``sk.targets.box(boxes, labels)`` and no
``score=`` (each method's default box score). A second table gives the same share through
``sk.explain`` for the gradient-family and CAM methods, with ``score="drise"``, ``score="class"``
and the method's default (absolute maps).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import saliency_kit as sk  # noqa: E402
from saliency_kit.data import scene_models, scenes  # noqa: E402, F401
from saliency_kit.targets.box import default_score  # noqa: E402
from saliency_kit.targets.detections import iou  # noqa: E402

TERMS = ("drise", "iou", "objectness", "class_prob", "class_logit")
METHODS = ("gradient", "integrated_gradients", "gradcam", "gradcam_plus_plus", "layercam", "guided_gradcam")


def shipped_scenes() -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``[(image [64, 64, 3] uint8, boxes [m, 4], labels [m])]`` for each shipped scene."""
    data = scenes.make_scenes(200, seed=5)
    found = []
    for path in sorted((ROOT / "examples" / "scenes").glob("scene*.png")):
        image = np.asarray(Image.open(path).convert("RGB"))
        i = int(np.flatnonzero((data.images == image).all(axis=(1, 2, 3)))[0])
        boxes, labels = scenes.scene_boxes(data, i)
        found.append((image, boxes, labels))
    return found


def term(outputs: tf.Tensor, box: np.ndarray, label: int, name: str) -> tf.Tensor:
    """One term of the box score of ``box`` [4] for class ``label`` from raw outputs [1, N, 10]."""
    proposals, objectness, logits = outputs[0, :, :4], tf.sigmoid(outputs[0, :, 4]), outputs[0, :, 5:]
    overlaps = iou(tf.constant(box[None, None], tf.float32), proposals[None])[0, 0]  # [N]
    p = tf.nn.softmax(logits, axis=-1)[:, label]
    product = overlaps * objectness * p
    j = int(tf.argmax(product))
    held = {"iou": overlaps[j], "objectness": objectness[j], "class_prob": p[j], "class_logit": logits[j, label]}
    if name == "drise":
        return tf.reduce_max(product)
    value = held[name]
    others = [v for k, v in held.items() if k not in (name, "class_logit")]
    return value * tf.stop_gradient(others[0] * others[1]) if name != "class_logit" else value


def inside(mass: np.ndarray, box: np.ndarray) -> float:
    """Fraction of ``mass`` [H, W] (non-negative) inside ``box`` (x0, y0, x1, y1) in pixels."""
    H, W = mass.shape
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    in_box = (xs >= box[0]) & (xs <= box[2]) & (ys >= box[1]) & (ys <= box[3])
    return float(mass[in_box].sum() / max(mass.sum(), 1e-12))


def explained_in_box(model: keras.Model, method: str, score: str | None) -> float:
    """Mean fraction of the absolute map's mass inside each ground-truth box: ``sk.explain`` of
    ``method`` with the box target (``score=None``: the method's default)."""
    shares = []
    for image, boxes, labels in shipped_scenes():
        target = sk.targets.box(boxes[None], labels[None], score=score)
        expl = sk.explain(model, image[None].astype("float32") / 255.0, method, target)
        masks = target.pixel_masks(1, *image.shape[:2])[0]  # [K, H, W]
        for k in range(len(boxes)):
            mass = np.abs(expl.maps[0, k])
            shares.append(float(mass[masks[k]].sum() / max(mass.sum(), 1e-12)))
    return float(np.mean(shares))


def main() -> None:
    model = keras.saving.load_model(ROOT / "saliency_kit" / "data" / "shapes_det.keras", compile=False)
    features = model.get_layer("features")
    tapped = keras.Model(model.inputs, [features.output, model.outputs[0]])
    rows: dict[str, dict[str, list[float]]] = {t: {"gradient": [], "gradcam": []} for t in TERMS}
    areas = []
    for image, boxes, labels in shipped_scenes():
        x = tf.constant(image[None].astype("float32") / 255.0)
        for box, label in zip(boxes, labels):
            areas.append(float((box[2] - box[0]) * (box[3] - box[1]) / (image.shape[0] * image.shape[1])))
            for name in TERMS:
                with tf.GradientTape(persistent=True) as tape:
                    tape.watch(x)
                    fmap, outputs = tapped(x)
                    s = term(outputs, box, int(label), name)
                g = np.abs(tape.gradient(s, x)[0].numpy()).sum(-1)
                a = tape.gradient(s, fmap)[0].numpy()  # [h, w, k]
                cam = np.maximum((a.mean(axis=(0, 1)) * fmap[0].numpy()).sum(-1), 0)
                cam = np.asarray(Image.fromarray(cam.astype(np.float32)).resize(image.shape[1::-1], Image.BILINEAR))
                rows[name]["gradient"].append(inside(g, box))
                rows[name]["gradcam"].append(inside(np.maximum(cam, 0), box))
    print(
        f"{len(areas)} boxes on {len(shipped_scenes())} shipped scenes; mean box area {np.mean(areas):.1%} of the image"
    )
    print(f"{'score term':<12} {'gradient in box':>16} {'Grad-CAM in box':>16}")
    for name in TERMS:
        g, c = np.mean(rows[name]["gradient"]), np.mean(rows[name]["gradcam"])
        print(f"{name:<12} {g:>16.1%} {c:>16.1%}")
    g, c = explained_in_box(model, "gradient", None), explained_in_box(model, "gradcam", None)
    print(f"{'default':<12} {g:>16.1%} {c:>16.1%}   (sk.explain, no score=: each method's default)")
    print()
    print(f"{'method':<22} {'default score':>13} {'drise':>8} {'class':>8} {'default':>8}")
    for method in METHODS:
        shares = [explained_in_box(model, method, score) for score in ("drise", "class", None)]
        own = default_score(sk.methods.get(method))
        print(f"{method:<22} {own:>13} " + " ".join(f"{v:>8.1%}" for v in shares))


if __name__ == "__main__":
    main()
