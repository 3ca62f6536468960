"""sk.evaluate against Quantus 0.6.0 on the same work, and the compute floor of that work.

    python scripts/bench_metrics.py            # 32 inputs 224x224, ResNet50 (weights=None)
    python scripts/bench_metrics.py --quick    # a small smoke run (4 inputs 64x64, few samples)

Four metrics, same model, inputs, targets and attributions on both sides:

- max_sensitivity, 10 noisy copies per input: the gradient re-run on every copy (Quantus: its
  explain_func, a batched ``tf.GradientTape`` over the Keras model, once per sample; ours is given
  the clean explanation, as Quantus is given ``a_batch``, so both run the same 320 gradients);
- faithfulness_correlation, 100 random subsets of 224 elements per input;
- pixel_flipping, 1568 elements per step (96 steps over 224×224×3; Quantus' default of one
  element per step would be 150,528 forward passes of the batch on either side);
- region_perturbation (pixel flipping by 8×8 regions, most relevant first), 100 regions.

Printed per metric: seconds for sk.evaluate, for Quantus, their ratio, and the floor: the same
number of model evaluations (forward, or forward + backward) run as one compiled batched loop in
plain TensorFlow, which no implementation can beat. Quantus 0.6.0 already batches these four
metrics over the inputs and runs the model through ``model.predict``, so on a large network both
are close to that floor; the ratio grows with the per-call overheads (small models, small inputs).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 inputs 64x64 and few samples (a smoke run)")
    parser.add_argument("--inputs", type=int, help="number of inputs (default 32; --quick 4)")
    parser.add_argument("--size", type=int, help="image side (default 224; --quick 64)")
    parser.add_argument("--samples", type=int, help="max_sensitivity's noisy copies per input (default 10)")
    parser.add_argument("--runs", type=int, help="faithfulness_correlation's subsets (default 100)")
    parser.add_argument("--regions", type=int, help="region_perturbation's regions (default 100)")
    parser.add_argument(
        "--features-in-step",
        type=int,
        help="pixel_flipping's elements per step (default 1568: 96 steps at 224x224x3; --quick 512)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=("max_sensitivity", "faithfulness_correlation", "pixel_flipping", "region_perturbation"),
        help="run only these metrics",
    )
    args = parser.parse_args()

    import keras
    import quantus
    import tensorflow as tf

    import saliency_kit as sk

    size, count = (64, 4) if args.quick else (224, 32)
    samples, runs, regions = (2, 5, 5) if args.quick else (10, 100, 100)
    size, count = args.size or size, args.inputs or count
    per_step = args.features_in_step or (512 if args.quick else 1568)
    flips = -(-size * size * 3 // per_step)
    samples, runs, regions = args.samples or samples, args.runs or runs, args.regions or regions
    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    x = np.random.default_rng(0).normal(size=(count, size, size, 3)).astype(np.float32)
    expl = sk.explain(model, x, "gradient", "top1")
    sk.engine.all_scores(model, np.resize(x, (32, *x.shape[1:])))  # the forward kernel, as after any first batch
    y = expl.targets[:, 0]
    pixels = expl.attributions.sum(axis=-1)  # [B, 1, H, W]: one map per input, broadcast over channels
    print(
        f"ResNet50 (weights=None) on {count} inputs {size}x{size}; max_sensitivity {samples} samples, "
        f"faithfulness_correlation {runs} subsets, pixel_flipping {flips} steps, region_perturbation {regions} "
        "regions; "
        f"{os.cpu_count()} CPUs (shared machine)"
    )

    @tf.function(jit_compile=False, reduce_retracing=True)
    def forward(batch):
        return model(batch, training=False)

    @tf.function(reduce_retracing=True)
    def gradient(batch, targets):
        with tf.GradientTape() as tape:
            tape.watch(batch)
            score = tf.reduce_sum(tf.gather(model(batch, training=False), targets, batch_dims=1))
        return tape.gradient(score, batch)

    def floor(evaluations: int, backward: bool) -> float:
        """Seconds for ``evaluations`` model runs in batches of 32, compiled, no metric around them."""
        batch = tf.constant(np.resize(x, (32, *x.shape[1:])))
        targets = tf.constant(np.resize(y, 32))
        (gradient(batch, targets) if backward else forward(batch))  # trace
        start = time.perf_counter()
        for _ in range(-(-evaluations // 32)):
            (gradient(batch, targets) if backward else forward(batch)).numpy()
        return time.perf_counter() - start

    def quantus_gradient(model, inputs, targets, **kwargs):
        """Quantus' explain_func: the gradient of each target logit, in the layout it is given."""
        inputs = np.asarray(inputs, dtype=np.float32)
        first = inputs.shape[1] == 3 and inputs.shape[-1] != 3
        batch = tf.constant(np.moveaxis(inputs, 1, -1) if first else inputs)
        values = gradient(batch, tf.constant(np.asarray(targets))).numpy()
        return np.moveaxis(values, -1, 1) if first else values

    work = {
        "max_sensitivity": (
            lambda: sk.evaluate.max_sensitivity(model, x, expl, nr_samples=samples),
            lambda: quantus.MaxSensitivity(nr_samples=samples, disable_warnings=True)(
                model=model,
                x_batch=x,
                y_batch=y,
                a_batch=np.moveaxis(expl.attributions[:, 0], -1, 1),
                channel_first=False,
                explain_func=quantus_gradient,
                batch_size=count,
            ),
            count * samples,
            True,
        ),
        "faithfulness_correlation": (
            lambda: sk.evaluate.faithfulness_correlation(model, x, pixels, y[:, None], nr_runs=runs),
            lambda: quantus.FaithfulnessCorrelation(nr_runs=runs, return_aggregate=False, disable_warnings=True)(
                model=model, x_batch=x, y_batch=y, a_batch=pixels, channel_first=False, batch_size=count
            ),
            count * runs,
            False,
        ),
        "pixel_flipping": (
            lambda: sk.evaluate.pixel_flipping(model, x, pixels, y[:, None], features_in_step=per_step),
            lambda: quantus.PixelFlipping(features_in_step=per_step, disable_warnings=True)(
                model=model, x_batch=x, y_batch=y, a_batch=pixels, channel_first=False, batch_size=count
            ),
            count * flips,
            False,
        ),
        "region_perturbation": (
            lambda: sk.evaluate.region_perturbation(model, x, pixels, y[:, None], regions_evaluation=regions),
            lambda: quantus.RegionPerturbation(regions_evaluation=regions, disable_warnings=True)(
                model=model, x_batch=x, y_batch=y, a_batch=pixels, channel_first=False, batch_size=count
            ),
            count * regions,
            False,
        ),
    }
    for name in args.only or list(work):
        ours, theirs, evaluations, backward = work[name]
        start = time.perf_counter()
        ours()
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        theirs()
        t_quantus = time.perf_counter() - start
        t_floor = floor(evaluations, backward)
        print(
            f"{name:26s} sk.evaluate {t_ours:8.1f} s   Quantus {t_quantus:8.1f} s   ratio {t_quantus / t_ours:5.2f}x   "
            f"floor ({evaluations} {'gradients' if backward else 'forwards'}) {t_floor:8.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
