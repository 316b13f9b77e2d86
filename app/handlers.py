"""Wrapping the tabs' event handlers: a user's mistake (a StoreError, a ModelError, a bad setting) becomes a
message in the page, never a stack trace."""

import functools
import inspect

from store.errors import StoreError
from training.models import ModelError

USER_ERRORS = (StoreError, ModelError, ValueError)


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
