"""What the attributions explain: class targets and target objects.

Every form of ``targets`` becomes one target object at the API's edge, :func:`as_target`
(:mod:`.classes`): class targets (an int, names, ``"topK"``, an array ``[B, K]``) a
:class:`Classes`, parsed by :func:`parse` and turned into int ``[B, K]`` by :func:`resolve`
(:mod:`.parse`; no model runs); a callable a :class:`Function`. Target objects say what to
explain on models whose output is not ``[B, C]``; each carries a per-input payload through the
engine's chunking (:mod:`.base`), and every method accepts them:

* :func:`region` — a class's logits over a region of a dense output (segmentation);
* :func:`box` — the D-RISE similarity of a box to a detector's raw proposals;
* :func:`output` — one head of a multi-output model (regression included);
* :func:`unit` — the activation of an inner unit;
* :func:`generated` — each generated token's log-probability under a causal language model
  (``[B, T, V]`` logits), all from one teacher-forced forward pass (:mod:`.generated`);
* :func:`contrast` — ``log p(token) − log p(foil)`` at one position of such a model (:mod:`.contrast`);
* :class:`Target` — subclass it for a kind of your own.

A list of target objects puts their columns side by side.

Each image's targets for a model's task (the command line, ``saliency batch`` and Python alike,
:mod:`.tasks`): :func:`task_targets` ``(model, inputs [B, H, W, C], TaskPlan, spec) ->
TaskTargets`` runs the model once in the engine and gives each image's :class:`Subject` list
(the classes of a classifier ``[B, C]``, the predicted or given regions of a segmentation model
``[B, H', W', C]``, the detected or given boxes of a detector ``[B, N, 4 + 1 + C]``, the
components of one head) and ``sk.explain``'s ``targets`` for the images that ask something.
A detector's raw output becomes detections in :mod:`.detections` (``decode``: a threshold and
non-max suppression; ``box_iou``, the one IoU).

Importing this package imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

from .base import PerInput, Resolved, Several, Target, TargetRequest, is_target
from .box import Box, box
from .classes import Classes, Function, as_target
from .contrast import Contrast, contrast
from .generated import Generated, generated
from .heads import Output, Unit, output, unit
from .parse import TargetSpec, class_names_of, combine, parse, parse_string, resolve
from .region import Region, region
from .tasks import (
    AskError,
    Request,
    Subject,
    TaskPlan,
    TaskTargets,
    explain_targets,
    subjects_from_outputs,
    task_targets,
)

__all__ = [
    "Target",
    "PerInput",
    "Resolved",
    "TargetRequest",
    "region",
    "box",
    "output",
    "unit",
    "generated",
    "contrast",
    "Region",
    "Box",
    "Output",
    "Unit",
    "Generated",
    "Contrast",
    "Classes",
    "Function",
    "Several",
    "is_target",
    "as_target",
    "TargetSpec",
    "parse",
    "parse_string",
    "combine",
    "resolve",
    "class_names_of",
    "task_targets",
    "TaskPlan",
    "Request",
    "Subject",
    "TaskTargets",
    "AskError",
    "subjects_from_outputs",
    "explain_targets",
]
