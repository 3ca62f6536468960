"""A test-only method, written as a user would write one: half the input gradient, ``[B, H, W, C]``.

Registered on import; nothing in the package names it."""

from saliency_kit import methods


@methods.register("halved_gradient", summary="half the gradient (a test-only method)", signed=True)
def halved_gradient(ctx):
    return 0.5 * ctx.gradients(ctx.inputs)
