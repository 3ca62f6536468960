"""XRAI (Kapishnikov et al., ICCV 2019): regions ranked by attribution gain.

Given per-pixel base attributions ``a`` (``base``: integrated gradients by default, reduced over
channels by their maximum, as PAIR's implementation) and overlapping candidate regions (Felzenszwalb
segmentations at several scales, each region dilated), XRAI grows a salient area greedily:

    R ← ∅
    repeat while area(R) ≤ area_threshold (fraction of the image) and regions remain:
        drop the regions adding fewer than 50 new pixels to R
        r* = argmax_r  mean_{p ∈ r \\ R} a_p        (the gain density of the new pixels)
        every new pixel p ∈ r* \\ R gets the value gain(r*);  R ← R ∪ r*

Pixels never reached get the mean attribution over them. The map is that value per pixel
(``[B, K, H, W]``; the attributions are the map). Ties go to the first region in the list.

Segments (``segments=None``), as the paper and PAIR: the image rescaled to [−1, 1] and resized
to 224×224, ``skimage.segmentation.felzenszwalb`` at scales 50, 100, 150, 250, 500, 1200
(σ = 0.8, minimum size 150), labels resized back (nearest), every region dilated by a disk of
radius 5. Or give ``segments``: a list of boolean ``[H, W]`` masks (for a single input), or one
such list per input.

The base method runs in the engine's compiled kernel; segmentation and ranking are NumPy
(scikit-image), run from the kernel as a host step (``ctx.host``) per chunk of inputs.

Speed: the gains are kept as running sums per region and updated only by the pixels each step
adds, so a whole ranking costs one pass over (regions × pixels) rather than one per step; the
dilation works inside each region's bounding box. Same order and map as PAIR's ``XRAI`` given
the same segments and base attributions.

Differences from PAIR's default: PAIR's IG averages two baselines (the image's min and its max);
here ``base`` runs with its own options (integrated gradients: ``baseline=0.0`` unless given).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import base_cost, require_channels_last
from .base import Option, Request, get, register

__all__ = ["xrai", "felzenszwalb_segments", "rank_regions", "segments_array", "prepare"]

SCALES = (50, 100, 150, 250, 500, 1200)
SIGMA = 0.8
MIN_SIZE = 150
SEGMENTATION_SIZE = (224, 224)
DILATION_RADIUS = 5
MIN_NEW_PIXELS = 50


# segments --------------------------------------------------------------------------------------
def _dilate_labels(labels: np.ndarray, radius: int) -> list[np.ndarray]:
    """One boolean mask per label of ``labels`` ``[H, W]`` (in label order), each dilated by a disk."""
    import scipy.ndimage
    from skimage.morphology import disk

    footprint = disk(radius).astype(bool)
    height, width = labels.shape
    offset = labels.min()
    masks = []
    boxes = scipy.ndimage.find_objects(labels - offset + 1)
    for value, box in enumerate(boxes):
        mask = np.zeros(labels.shape, bool)
        if box is None:  # a label with no pixel: an empty region, as PAIR's list has
            masks.append(mask)
            continue
        rows = slice(max(box[0].start - radius, 0), min(box[0].stop + radius, height))
        cols = slice(max(box[1].start - radius, 0), min(box[1].stop + radius, width))
        inside = labels[rows, cols] == value + offset
        mask[rows, cols] = scipy.ndimage.binary_dilation(inside, structure=footprint)
        masks.append(mask)
    return masks


def felzenszwalb_segments(image: np.ndarray) -> list[np.ndarray]:
    """The paper's candidate regions of one image ``[H, W, C]``: boolean ``[H, W]`` masks."""
    from skimage.segmentation import felzenszwalb
    from skimage.transform import resize

    image = np.asarray(image, np.float64)
    low, high = image.min(), image.max()
    scaled = (image - low) / (high - low) * 2.0 - 1.0 if high > low else np.zeros_like(image)
    small = resize(scaled, SEGMENTATION_SIZE, order=3, mode="constant", preserve_range=True, anti_aliasing=True)
    masks = []
    for scale in SCALES:
        labels = felzenszwalb(small, scale=scale, sigma=SIGMA, min_size=MIN_SIZE)
        labels = resize(
            labels, image.shape[:2], order=0, preserve_range=True, mode="constant", anti_aliasing=False
        ).astype(int)
        masks.extend(_dilate_labels(labels, DILATION_RADIUS))
    return masks


# ranking ---------------------------------------------------------------------------------------
def rank_regions(
    attributions: np.ndarray, segments: Any, area_threshold: float = 1.0, min_new_pixels: int = MIN_NEW_PIXELS
) -> tuple[np.ndarray, list[int]]:
    """``(map [H, W] float64, order)``: XRAI's map from a per-pixel attribution ``[H, W]`` and
    boolean region masks; ``order`` lists the indices of the regions added, first to last."""
    attributions = np.asarray(attributions, np.float64)
    shape = attributions.shape
    regions = np.asarray(segments, bool).reshape(len(segments), -1)  # [R, P]
    flat = attributions.reshape(-1)
    new_pixels = regions.sum(axis=1).astype(np.int64)  # pixels each region would add to R
    new_sum = regions.astype(np.float64) @ flat  # their attribution sum
    remaining = np.ones(len(regions), bool)
    covered = np.zeros(flat.size, bool)
    values = np.full(flat.size, -np.inf)
    order = []
    area = 0.0
    while area <= area_threshold:
        remaining &= new_pixels >= min_new_pixels
        if not remaining.any():
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            gains = np.where(remaining, new_sum / np.maximum(new_pixels, 1), -np.inf)
        best = int(np.argmax(gains))
        added = regions[best] & ~covered
        values[added] = gains[best]
        covered |= added
        area = covered.mean()
        remaining[best] = False
        order.append(best)
        columns = np.flatnonzero(added)  # update every region's running sums by the new pixels
        hit = regions[:, columns]
        new_pixels -= hit.sum(axis=1)
        new_sum -= hit.astype(np.float64) @ flat[columns]
    rest = values == -np.inf
    if rest.any():
        values[rest] = flat[rest].mean()
    return values.reshape(shape), order


# the method ------------------------------------------------------------------------------------
def segments_array(request: Request, segments: Any) -> np.ndarray | None:
    """``None`` (Felzenszwalb, computed per input), or the given masks as one boolean array
    ``[B, R, H, W]`` (inputs with fewer regions padded with empty masks, which XRAI never picks)."""
    if segments is None:
        return None
    size = tuple(request.inputs.shape[1:3])
    batch = len(request.inputs)
    if isinstance(segments, np.ndarray) and segments.ndim == 4:
        lists = list(segments)
    elif isinstance(segments, (list, tuple)) and segments:
        nested = isinstance(segments[0], (list, tuple)) or np.ndim(segments[0]) == 3
        lists = list(segments) if nested else [segments]
    else:
        raise TypeError(
            "segments must be None, a list of boolean [H, W] masks, or one such list per input; "
            f"received {type(segments).__name__}."
        )
    if len(lists) != batch:
        raise ValueError(
            f"segments must give one list of masks per input ({batch}); received {len(lists)} "
            f"{'lists' if len(lists) != 1 else 'list'} (one list is for a single input)."
        )
    arrays = []
    for masks in lists:
        array = np.asarray(masks)
        if array.ndim != 3 or array.shape[1:] != size or len(array) == 0:
            raise ValueError(
                f"each input's segments must be boolean masks [H, W] = {list(size)}; "
                f"received an array of shape {array.shape}."
            )
        arrays.append(array.astype(bool))
    most = max(len(a) for a in arrays)
    padded = np.zeros((batch, most, *size), bool)
    for b, array in enumerate(arrays):
        padded[b, : len(array)] = array
    return padded


def prepare(request: Request, options: dict) -> dict:
    require_channels_last(request, "xrai")
    return {
        **options,
        "area_threshold": float(options["area_threshold"]),
        "segments": segments_array(request, options["segments"]),
    }


def _rank_chunk(images: Any, per_pixel: Any, regions: Any, threshold: Any, given: Any) -> Any:
    """NumPy: XRAI maps ``[n, K, H, W]`` of a chunk (segmenting each image unless ``given``)."""
    out = np.zeros(per_pixel.shape, np.float32)
    for b in range(len(images)):
        masks = list(regions[b]) if given else felzenszwalb_segments(images[b])
        for k in range(per_pixel.shape[1]):
            out[b, k] = rank_regions(per_pixel[b, k], masks, threshold)[0]
    return out


@register(
    "xrai",
    title="XRAI",
    summary="XRAI (Kapishnikov et al. 2019): image regions ranked by the density of a base method's attributions; "
    "the map gives each pixel its region's gain",
    options=[
        Option("base", "integrated_gradients", help="the per-pixel attributions ranked (any non-CAM method)"),
        Option(
            "segments",
            None,
            type=str,
            array=True,
            help="None: Felzenszwalb at 6 scales; or boolean [H, W] masks (per input)",
        ),
        Option(
            "area_threshold", 1.0, low=0, high=1, low_open=True, help="stop once this fraction of the image is covered"
        ),
    ],
    reduce="none",
    cam=True,  # attributions are [B, K, H, W] region maps, shown like CAMs
    extends="base",
    warn_zero=False,
    prepare=prepare,
    cost=base_cost,
)
def xrai(ctx: Any, base: str, segments: Any, area_threshold: float, **base_options: Any) -> Any:
    from keras import ops

    a = get(base).compute(ctx, **base_options)
    a = a["attributions"] if isinstance(a, dict) else a
    per_pixel = ops.max(a, axis=-1) if len(a.shape) == 5 else a  # [n, K, H, W]: channel max, as PAIR
    given = segments is not None
    regions = ops.take(segments, ctx.index, axis=0) if given else ops.zeros([0], "bool")
    return ctx.host(
        lambda images, values, masks: _rank_chunk(images, values, masks, area_threshold, given),
        [ctx.inputs, ops.cast(per_pixel, "float64"), regions],
        "float32",
        per_pixel.shape,
    )
