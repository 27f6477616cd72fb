"""xformers.ops.fmha.attn_bias (0.0.28) over sdpa: every bias class, from
xformers_base.py (dense masks), xformers_blockdiag.py (varlen) and
xformers_paged.py (paged and gappy keys)."""
from .xformers_base import (  # noqa: F401
    AttentionBias, LocalAttentionFromBottomRightMask, LowerTriangularFromBottomRightLocalAttentionMask,
    LowerTriangularFromBottomRightMask, LowerTriangularMask, LowerTriangularMaskWithTensorBias)
from .xformers_blockdiag import (  # noqa: F401
    BlockDiagonalCausalFromBottomRightMask, BlockDiagonalCausalLocalAttentionFromBottomRightMask,
    BlockDiagonalCausalLocalAttentionMask, BlockDiagonalCausalLocalAttentionPaddedKeysMask,
    BlockDiagonalCausalMask, BlockDiagonalCausalWithOffsetPaddedKeysMask, BlockDiagonalMask,
    BlockDiagonalPaddedKeysMask, PaddedSeqLenInfo, SeqLenInfo)
from .xformers_paged import (  # noqa: F401
    BlockDiagonalCausalWithOffsetGappyKeysMask, BlockDiagonalGappyKeysMask, GappySeqInfo,
    PagedBlockDiagonalCausalWithOffsetPaddedKeysMask, PagedBlockDiagonalGappyKeysMask,
    PagedBlockDiagonalPaddedKeysMask)

__all__ = [
    "AttentionBias", "LowerTriangularMask", "LowerTriangularMaskWithTensorBias",
    "LowerTriangularFromBottomRightMask", "LowerTriangularFromBottomRightLocalAttentionMask",
    "LocalAttentionFromBottomRightMask", "BlockDiagonalMask", "BlockDiagonalCausalMask",
    "BlockDiagonalCausalFromBottomRightMask", "BlockDiagonalCausalLocalAttentionMask",
    "BlockDiagonalCausalLocalAttentionFromBottomRightMask", "BlockDiagonalPaddedKeysMask",
    "BlockDiagonalCausalWithOffsetPaddedKeysMask",
    "BlockDiagonalCausalLocalAttentionPaddedKeysMask", "PagedBlockDiagonalPaddedKeysMask",
    "PagedBlockDiagonalCausalWithOffsetPaddedKeysMask", "BlockDiagonalGappyKeysMask",
    "BlockDiagonalCausalWithOffsetGappyKeysMask", "PagedBlockDiagonalGappyKeysMask",
    "SeqLenInfo", "PaddedSeqLenInfo", "GappySeqInfo",
]
