"""The conformance table's rows come from the registries: every registered method on every input
kind and every shipped target kind, every declared metric; a shipped target kind without an
example in ``conformance_support.py`` fails here, on every backend."""

from conformance_support import TARGET_KINDS, metric_rows, rows

from saliency_kit import evaluate, methods, targets


def test_every_shipped_target_kind_has_an_example():
    shipped = {
        name.lower()
        for name in targets.__all__
        if isinstance(getattr(targets, name), type)
        and issubclass(getattr(targets, name), targets.Target)
        and getattr(targets, name) not in (targets.Target, targets.Several)
    }
    assert shipped == set(TARGET_KINDS)


def test_every_method_and_metric_has_rows():
    table = rows()
    for name in methods.names():
        assert {(r.target_kind, r.input_kind) for r in table if r.method == name} == {
            *((kind, "image") for kind in TARGET_KINDS),
            ("classes", "several"),
            ("classes", "tokens"),
        }
    assert metric_rows() == [metric.name for metric in evaluate.metrics()] and len(metric_rows()) > 10
