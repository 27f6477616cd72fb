"""flash_attn shim: `import flash_attn` resolves to sdpa.

Put this folder first on the path to run flash_attn code on sdpa unchanged:

    PYTHONPATH=python/flash_attn_shim python train.py

    from flash_attn import flash_attn_func                         # works
    from flash_attn.flash_attn_interface import flash_attn_varlen_func  # works

Everything comes from sdpa.flash_attn_interface (see its docstring for the few
differences from flash_attn 2.6). Only the functional interface is provided.
"""
from sdpa.flash_attn_interface import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = "2.6.3"  # the flash_attn interface version this shim follows
