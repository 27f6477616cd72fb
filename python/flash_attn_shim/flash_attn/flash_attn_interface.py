"""flash_attn.flash_attn_interface shim: re-exports sdpa.flash_attn_interface."""
from sdpa.flash_attn_interface import *  # noqa: F401,F403
from sdpa.flash_attn_interface import __all__  # noqa: F401
from sdpa.flash_attn_interface import _get_block_size_n  # noqa: F401
