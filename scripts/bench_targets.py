"""Benchmark target objects: many boxes of one image, and a region against a class.

    python scripts/bench_targets.py [--repeats R] [--boxes K] [--size S]

1. Boxes (a small single-stage detector, ``S×S×3`` input, 256 raw proposals): explaining ``K``
   boxes of one image with the gradient shares its forward pass (the K boxes are K columns):
   * peak memory of K boxes over 1 box, each in a fresh subprocess (peak resident set size
     ``VmHWM``; TensorFlow keeps no allocator statistics on CPU): target ≤ 1.2;
   * time of K boxes over ``forward + K × backward`` of a plain compiled TensorFlow function
     (forward alone, and forward + one backward of one box's D-RISE score, written directly):
     target ≤ 1.0; and over one plain compiled function that runs the forward pass once and the
     K backward passes from a persistent tape (the bound measured whole, not as a difference of
     two small times).
2. Region against class: the gradient of a region target (the whole output, class c) of a
   segmentation net against the gradient of class c of the same net followed by a global average
   pooling (the same number, the same backbone, shared weights): target ratio ≤ 1.05; the two
   attributions agree.

Times are the minimum over ``--repeats`` rounds after one warm-up (compilation) run; each round
times every measurement once. On a shared machine they are noisy; say so when quoting them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CLASSES = 6


def _best_times(runs: dict, repeats: int) -> dict:
    for fn in runs.values():
        fn()  # tracing and compilation are not what we measure
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def backbone(size: int):
    import keras

    inputs = keras.Input((size, size, 3))
    h = inputs
    for filters in (32, 64, 128):
        h = keras.layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(h)
        h = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(h)
    return inputs, h  # [size/8, size/8, 128]


def detector(size: int):
    """Raw proposals ``[B, (size/8)², 4 + 1 + C]``: anchor boxes moved by the head, objectness
    through a sigmoid, class logits."""
    import keras
    import numpy as np
    from keras import ops

    keras.utils.set_random_seed(0)
    inputs, h = backbone(size)
    cells = size // 8
    head = keras.layers.Conv2D(5 + CLASSES, 1)(h)
    flat = keras.layers.Reshape((cells * cells, 5 + CLASSES))(head)
    centres = (np.stack(np.meshgrid(np.arange(cells), np.arange(cells)), -1).reshape(-1, 2) + 0.5) * 8
    anchors = np.concatenate([centres - 12, centres + 12], axis=1).astype("float32")

    def decode(t):
        return ops.concatenate([anchors + 8 * t[..., :4], ops.sigmoid(t[..., 4:5]), t[..., 5:]], axis=-1)

    return keras.Model(inputs, keras.layers.Lambda(decode)(flat))


def boxes_of(count: int, size: int):
    import numpy as np

    rng = np.random.default_rng(1)
    corner = rng.uniform(0, size * 0.7, size=(count, 2))
    extent = rng.uniform(size * 0.1, size * 0.3, size=(count, 2))
    return np.concatenate([corner, corner + extent], axis=1)[None].astype("float32")  # [1, K, 4]


def memory_child(count: int, size: int) -> None:
    import numpy as np

    import saliency_kit as sk

    model = detector(size)
    x = np.random.default_rng(0).uniform(size=(1, size, size, 3)).astype("float32")
    sk.explain(model, x, "gradient", sk.targets.box([[0, 0, 8, 8]], 0), batch_size=2)  # start-up, another kernel
    before = _status_mb("VmRSS")
    sk.explain(model, x, "gradient", sk.targets.box(boxes_of(count, size), 1), batch_size=64)
    print(json.dumps({"boxes": count, "before_mb": before, "peak_mb": _status_mb("VmHWM")}))


def _memory(count: int, size: int) -> dict:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--memory-child", str(count), "--size", str(size)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def drise(outputs, box, c):
    """One box's D-RISE score in plain TensorFlow: max_j IoU · objectness · softmax class c."""
    import tensorflow as tf

    b = outputs[0]
    width = tf.nn.relu(tf.minimum(box[2], b[:, 2]) - tf.maximum(box[0], b[:, 0]))
    height = tf.nn.relu(tf.minimum(box[3], b[:, 3]) - tf.maximum(box[1], b[:, 1]))
    inter = width * height
    area = tf.nn.relu(b[:, 2] - b[:, 0]) * tf.nn.relu(b[:, 3] - b[:, 1])
    iou = tf.math.divide_no_nan(inter, (box[2] - box[0]) * (box[3] - box[1]) + area - inter)
    return tf.reduce_max(iou * b[:, 4] * tf.nn.softmax(b[:, 5:])[:, c])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--boxes", type=int, default=50)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--memory-child", type=int, default=None)
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child, args.size)
        return

    import keras
    import numpy as np
    import tensorflow as tf

    import saliency_kit as sk

    size, K = args.size, args.boxes
    model = detector(size)
    x = np.random.default_rng(0).uniform(size=(1, size, size, 3)).astype("float32")
    boxes = boxes_of(K, size)
    xt = tf.constant(x)

    @tf.function
    def forward(z):
        return model(z, training=False)

    @tf.function
    def forward_backward(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            score = drise(model(z, training=False), tf.constant(boxes[0, 0]), 1)
        return tape.gradient(score, z)

    targets_t = tf.constant(boxes[0])

    @tf.function
    def forward_k_backward(z):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(z)
            outputs = model(z, training=False)
            scores = [drise(outputs, targets_t[k], 1) for k in range(K)]
        return tf.stack([tape.gradient(score, z) for score in scores])

    times = _best_times(
        {
            "forward": lambda: forward(xt).numpy(),
            "forward + 1 backward": lambda: forward_backward(xt).numpy(),
            f"plain TF: forward + {K} backward in one function": lambda: forward_k_backward(xt).numpy(),
            f"explain, {K} boxes": lambda: sk.explain(model, x, "gradient", sk.targets.box(boxes, 1), batch_size=64),
            "explain, 1 box": lambda: sk.explain(model, x, "gradient", sk.targets.box(boxes[:, :1], 1), batch_size=64),
        },
        args.repeats,
    )
    backward = times["forward + 1 backward"] - times["forward"]
    bound = times["forward"] + K * backward
    print(f"\nBoxes: detector {size}×{size}×3, {model.output.shape[1]} proposals, gradient, batch_size=64\n")
    print("| measurement | ms |\n|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {1000 * seconds:.1f} |")
    print(f"| bound: forward + {K} × backward | {1000 * bound:.1f} |")
    plain = times[f"plain TF: forward + {K} backward in one function"]
    print(
        f"\ntime ratio, {K} boxes / (forward + {K} backward): {times[f'explain, {K} boxes'] / bound:.3f} "
        f"(target ≤ 1.0); over the plain TF function: {times[f'explain, {K} boxes'] / plain:.3f}"
    )

    one, many = _memory(1, size), _memory(K, size)
    print(
        f"peak memory (VmHWM, fresh subprocesses): 1 box {one['peak_mb']:.0f} MB, {K} boxes "
        f"{many['peak_mb']:.0f} MB; ratio {many['peak_mb'] / one['peak_mb']:.3f} (target ≤ 1.2)"
    )

    keras.utils.set_random_seed(0)
    inputs, h = backbone(size)
    segmentation = keras.Model(inputs, keras.layers.Conv2D(CLASSES, 1)(h))
    classifier = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(segmentation.output))
    images = np.random.default_rng(2).uniform(size=(8, size, size, 3)).astype("float32")
    whole = np.ones(segmentation.output.shape[1:3], bool)
    region = sk.targets.region(whole, 3)
    times = _best_times(
        {
            "class 3 (classifier)": lambda: sk.explain(classifier, images, "gradient", 3),
            "region, class 3 (segmentation)": lambda: sk.explain(segmentation, images, "gradient", region),
        },
        args.repeats,
    )
    gap = np.abs(
        sk.explain(classifier, images, "gradient", 3).attributions
        - sk.explain(segmentation, images, "gradient", region).attributions
    ).max()
    print(f"\nRegion against class: 8 inputs {size}×{size}×3, gradient\n")
    print("| measurement | ms |\n|---|---|")
    for name, seconds in times.items():
        print(f"| {name} | {1000 * seconds:.1f} |")
    ratio = times["region, class 3 (segmentation)"] / times["class 3 (classifier)"]
    print(f"\ntime ratio, region / class: {ratio:.3f} (target ≤ 1.05); largest attribution difference {gap:.2e}")


if __name__ == "__main__":
    main()
