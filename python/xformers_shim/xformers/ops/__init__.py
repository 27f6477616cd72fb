"""xformers.ops shim: the memory-efficient attention functions and biases, from sdpa."""
from sdpa.xformers_ops import *  # noqa: F401,F403

from . import fmha  # noqa: F401,E402
