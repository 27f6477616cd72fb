"""xformers.ops.fmha.attn_bias shim: the attention biases sdpa understands."""
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
    SeqLenInfo,
)
