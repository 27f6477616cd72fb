"""xformers.ops.fmha shim: the attention functions and biases, from sdpa."""
from sdpa.xformers_ops import (  # noqa: F401
    memory_efficient_attention,
    memory_efficient_attention_backward,
    memory_efficient_attention_forward,
    memory_efficient_attention_forward_requires_grad,
    memory_efficient_attention_partial,
    merge_attentions,
)

from . import attn_bias  # noqa: F401,E402
from .attn_bias import AttentionBias, BlockDiagonalMask, LowerTriangularMask  # noqa: F401,E402
