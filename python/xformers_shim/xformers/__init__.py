"""xformers shim: `import xformers.ops` resolves to sdpa.

    PYTHONPATH=python/xformers_shim python app.py

Provides xformers.ops.memory_efficient_attention and the attention biases of
xformers.ops.fmha.attn_bias (see sdpa.xformers_ops for what is covered).
"""
__version__ = "0.0.28+sdpa"
