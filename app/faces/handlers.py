"""Wrapping the tabs' event handlers: a user's mistake (a UserError, a ModelError, a bad setting) becomes a
message in the page, never a stack trace; and, under --auth, the store-wide tabs answer admins only."""

import functools
import inspect

from store.errors import UserError
from training.models import ModelError

USER_ERRORS = (UserError, ModelError, ValueError)


def safe(fn):
    """`fn` with user errors shown as gr.Error; a streaming (generator) handler stays a generator, and the
    signature is kept (Gradio looks for gr.Request and gr.Progress in it)."""
    import gradio as gr

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except USER_ERRORS as e:
                raise gr.Error(str(e)) from None

        return stream

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            raise gr.Error(str(e)) from None

    return run


def admin_only(ctx, fn, quiet: int = 0):
    """`fn` as `safe` makes it, run only for an admin (AppContext.check_admin). Every event of the Data and Train
    tabs goes through here: Gradio exposes every event as an endpoint, so hiding a tab is not enough.

    quiet=N: a refresh with N outputs (page load, timer) leaves them unchanged for a non-admin instead of showing an
    error every two seconds."""
    import gradio as gr

    inner = safe(fn)
    sig = inspect.signature(inner)
    request_param = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request)

    def run(request, *args, **kwargs):
        try:
            ctx.check_admin(request)
        except UserError as e:
            if quiet:
                return gr.skip() if quiet == 1 else tuple(gr.skip() for _ in range(quiet))
            raise gr.Error(str(e)) from None
        return inner(*args, **kwargs)

    run.__signature__ = sig.replace(parameters=[request_param, *sig.parameters.values()])  # Gradio reads both
    run.__annotations__ = {**getattr(inner, "__annotations__", {}), "request": gr.Request}
    run.__name__ = getattr(fn, "__name__", "admin_only")
    return run
