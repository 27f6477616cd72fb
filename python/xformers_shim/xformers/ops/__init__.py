"""xformers.ops shim: memory_efficient_attention and the attention biases, from sdpa."""
from sdpa.xformers_ops import (  # noqa: F401
    AttentionBias,
    BlockDiagonalCausalFromBottomRightMask,
    BlockDiagonalCausalLocalAttentionMask,
    BlockDiagonalCausalMask,
    BlockDiagonalMask,
    LocalAttentionFromBottomRightMask,
    LowerTriangularFromBottomRightMask,
    LowerTriangularMask,
    LowerTriangularMaskWithTensorBias,
    memory_efficient_attention,
)

from . import fmha  # noqa: F401,E402
