"""``pipeline_def``: a graph-definition function made a pipeline factory (DALI's decorator)."""
from __future__ import annotations

import functools
import inspect

from .dali.pipeline_api import DALI_PIPELINE_HINTS
from .pipeline import Pipeline

_PIPE_PARAMS = set(inspect.signature(Pipeline.__init__).parameters) - {"self", "dali_tuning"} | set(
    DALI_PIPELINE_HINTS) | {"enable_checkpointing"}


def pipeline_def(fn=None, **defaults):
    """Decorator turning a graph-definition function into a pipeline factory:

        @pipeline_def(batch_size=8, num_threads=2, seed=0)
        def det_pipe(root):
            images, boxes = fn.readers.voc(root=root)
            ...
            return images, boxes

        pipe = det_pipe("data/voc", batch_size=16)   # pipeline arguments may be given here too

    A keyword the graph function declares as a parameter goes to the graph function, even where
    it also names a Pipeline argument (as in DALI): ``def g(shard_id=0, num_shards=1)`` gets
    ``g(shard_id=1, num_shards=2)``'s values. Such a Pipeline argument can then be set in
    ``@pipeline_def(...)`` only.
    """
    def deco(f):
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        own = {k for k, p in inspect.signature(f).parameters.items() if p.kind in kinds}

        @functools.wraps(f)
        def factory(*args, **kwargs):
            pipe_kw = {k: v for k, v in kwargs.items() if k in _PIPE_PARAMS and k not in own}
            params = {**defaults, **pipe_kw}
            fargs = {k: v for k, v in kwargs.items() if k not in pipe_kw}
            pipe = Pipeline(**params)
            with pipe:
                out = f(*args, **fargs)
            pipe.set_outputs(*(out if isinstance(out, (tuple, list)) else (out,)))
            return pipe

        return factory

    return deco(fn) if fn is not None else deco
