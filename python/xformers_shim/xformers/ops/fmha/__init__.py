"""xformers.ops.fmha shim."""
from sdpa.xformers_ops import memory_efficient_attention  # noqa: F401

from . import attn_bias  # noqa: F401,E402
from .attn_bias import (  # noqa: F401,E402
    BlockDiagonalMask,
    LowerTriangularMask,
)
