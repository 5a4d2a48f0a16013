"""The graph layer: tracing and the op registry core (``trace``), running a batch's pending
geometry (``materialize``: the one warp, the one box transform). Imports core and kernels."""
