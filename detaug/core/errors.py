"""Errors that cross layers: raised by ops and kernels, caught by the executor.

Bottom layer (imports nothing of detaug), so that every layer can raise them. This module is
the one home of each: ``from detaug.core.errors import SampleError``.
"""
from __future__ import annotations


class SampleError(Exception):
    """A sample could not be produced (corrupt image, missing file). ``position`` is its place
    in the batch and ``path`` its file; under ``on_error='skip'`` the executor replaces it."""

    def __init__(self, message, position=None, path=None):
        super().__init__(message)
        self.position, self.path = position, path

    def __reduce__(self):  # keeps position and path when a worker process sends it back
        return (type(self), (str(self), self.position, self.path), self.__dict__)


class NotFed(RuntimeError):
    """A feed_input source has no batch for the next launch yet (raised by the pipeline while it
    prepares a launch; the executor lets it through to the caller)."""


class NotPlannable(Exception):
    """A launch of a GPU pipeline cannot be planned ahead on the host (an image size the reader
    does not know, an op that needs pixels before the warp): the launch runs the whole graph in
    this process instead (detaug/runtime/gpu/plan_ahead.py). Raised while planning, never to the user."""
