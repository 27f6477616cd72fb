"""sdpa: Python binding (ctypes) of libsdpa, fused scaled-dot-product attention.

    import sdpa
    out = sdpa.forward(q, k, v, causal=True)                 # torch, numpy or DLPack
    out, lse = sdpa.forward(q, k, v, return_lse=True)
    dq, dk, dv = sdpa.backward(dout, q, k, v, out, lse)
    out, lse = sdpa.merge_states(out_parts, lse_parts)

Front ends: sdpa.flash_attn_interface (flash_attn 2.6 functions), sdpa.xformers_ops
(xformers.ops.memory_efficient_attention), sdpa.torch_ops (torch autograd and
torch.library custom ops sdpa::fwd / sdpa::bwd). See python/README.md.

Importing sdpa needs neither torch nor numpy, and loads libsdpa on the first call.
"""
from ._lib import (
    SdpaError,
    SDPA_OK,
    SDPA_ERR_INVALID_ARGUMENT,
    SDPA_ERR_NOT_SUPPORTED,
    SDPA_ERR_OUT_OF_MEMORY,
    SDPA_ERR_CUDA,
    SDPA_ERR_INTERNAL,
    library_path,
)
from ._core import (
    forward,
    backward,
    merge_states,
    explain,
    kernels,
    version,
    cuda_available,
    status_string,
)

__version__ = "0.1.0"

__all__ = [
    "SdpaError", "forward", "backward", "merge_states", "explain", "kernels", "version",
    "cuda_available", "status_string", "library_path", "SDPA_OK", "SDPA_ERR_INVALID_ARGUMENT",
    "SDPA_ERR_NOT_SUPPORTED", "SDPA_ERR_OUT_OF_MEMORY", "SDPA_ERR_CUDA", "SDPA_ERR_INTERNAL",
]


def __getattr__(name):
    # lazy submodules: sdpa.torch_ops imports torch, so only on demand
    if name in ("torch_ops", "flash_attn_interface", "xformers_ops", "distributed"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'sdpa' has no attribute %r" % name)
