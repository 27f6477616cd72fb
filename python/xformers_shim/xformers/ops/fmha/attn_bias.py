"""xformers.ops.fmha.attn_bias shim: the attention biases, from sdpa.xformers_bias."""
from sdpa.xformers_bias import *  # noqa: F401,F403
from sdpa.xformers_bias import GappySeqInfo as _GappySeqInfo  # noqa: F401
from sdpa.xformers_bias import PaddedSeqLenInfo as _PaddedSeqLenInfo  # noqa: F401
from sdpa.xformers_bias import SeqLenInfo as _SeqLenInfo  # noqa: F401
from sdpa.xformers_bias import __all__  # noqa: F401
