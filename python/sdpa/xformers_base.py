"""xformers' attention-bias classes (xformers.ops.fmha.attn_bias, 0.0.28) over sdpa:
the base class and the masks of one dense problem (causal in both alignments,
local windows, a causal mask plus a tensor). The block-diagonal (varlen) masks
are in xformers_blockdiag.py, the paged and gappy-keys ones in xformers_paged.py.

Each class says how it maps onto one sdpa call (_sdpa_args): a mask alignment
and window, an additive tensor, or the varlen layout. materialize() builds the
dense additive bias (0 or -inf, plus any tensor) for reference code and tests,
as xformers does. Nothing here computes attention.
"""
import math
from dataclasses import dataclass

import torch

def _keep_mask(m, n, align, left, right, device):
    """Bool [m, n]: the keys each query sees under sdpa's window rule
    (include/sdpa.h: i + off - left <= j <= i + off + right, -1 unbounded)."""
    i = torch.arange(m, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    off = (n - m) if align == "bottom-right" else 0
    keep = torch.ones(m, n, dtype=torch.bool, device=device)
    if left >= 0:
        keep &= j >= i + off - left
    if right >= 0:
        keep &= j <= i + off + right
    return keep


def _additive(keep, dtype):
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, -math.inf)


class AttentionBias:
    """Base of the structured biases. Subclasses set the mask (_causal, _align,
    _window) and, where they carry one, a tensor (_tensor)."""

    HOLDS_DENSE_TENSOR = False
    _causal = False
    _align = "top-left"

    @property
    def _window(self):
        return (-1, 0) if self._causal else (-1, -1)

    def _tensor(self):
        return None

    def _block(self, m, n, dtype, device):
        """The additive mask of one [m, n] block."""
        left, right = self._window
        return _additive(_keep_mask(m, n, self._align, left, right, device), dtype)

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        """The dense additive bias [..., M, N] (0 / -inf), for reference code."""
        return self._block(shape[-2], shape[-1], dtype, device).expand(shape).contiguous()

    def to(self, device):
        return self

    def detach(self):
        return self

    def _sdpa_args(self, device):
        """sdpa keywords of this bias (torch_ops.attention), for inputs on device."""
        return dict(causal=self._causal, align=self._align, window=self._window,
                    bias=self._tensor())


def _device_dtype(args, kwargs):
    """(device, dtype) named by tensor.to()-style arguments (None where not named)."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (str, torch.device, int)):
            device = a
    return (None if device is None else torch.device(device)), dtype


class LowerTriangularMask(AttentionBias):
    """Causal, top-left aligned: query i sees keys j <= i. Like xformers' tensor
    form it has a device and a dtype (those of the tensors it will meet), set
    by to() / cuda()."""
    _causal = True
    device = torch.device("cpu")
    dtype = torch.float32

    def add_bias(self, bias):
        return LowerTriangularMaskWithTensorBias(bias)

    def to(self, *args, **kwargs):
        device, dtype = _device_dtype(args, kwargs)
        m = LowerTriangularMask()
        m.device = self.device if device is None else device
        m.dtype = self.dtype if dtype is None else dtype
        return m

    def cuda(self, device=None):
        return self.to("cuda" if device is None else torch.device("cuda", device))


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    """LowerTriangularMask plus an additive tensor (broadcastable to [B, H, M, N]).
    Gradients reach the tensor through attention; detach(), backward() and .grad
    act on it, as on xformers' tensor-subclass form."""
    HOLDS_DENSE_TENSOR = True

    def __init__(self, bias):
        self._bias = bias

    def _tensor(self):
        return self._bias

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        # the mask of `shape` broadcast against the tensor (xformers adds them)
        mask = self._block(shape[-2], shape[-1], dtype, device).expand(shape)
        return mask + self._bias.to(dtype=dtype, device=mask.device)

    def to(self, *args, **kwargs):
        return LowerTriangularMaskWithTensorBias(self._bias.to(*args, **kwargs))

    def cuda(self, device=None):
        return LowerTriangularMaskWithTensorBias(self._bias.cuda(device))

    def detach(self):
        return LowerTriangularMaskWithTensorBias(self._bias.detach())

    def backward(self, *args, **kwargs):
        return self._bias.backward(*args, **kwargs)


# the tensor's own attributes, read through (xformers' form is that tensor)
for _name in ("grad", "requires_grad", "shape", "dtype", "device"):
    setattr(LowerTriangularMaskWithTensorBias, _name,
            property(lambda self, _n=_name: getattr(self._bias, _n)))


class LowerTriangularFromBottomRightMask(AttentionBias):
    """Causal, bottom-right aligned: query i sees keys j <= i + N - M."""
    _causal = True
    _align = "bottom-right"

    def make_local_attention(self, window_size):
        return LowerTriangularFromBottomRightLocalAttentionMask(window_size)


class _LastKeys:
    """Mixin of the local causal masks: each query sees its last _window_size
    keys (window (_window_size - 1, 0)); listed first among the bases, so its
    __post_init__ checks the window and then runs the mask's own."""

    def __post_init__(self):
        if self._window_size <= 0:
            raise ValueError("window_size = %d: expected > 0" % self._window_size)
        post = getattr(super(), "__post_init__", None)
        if post is not None:
            post()

    @property
    def _window(self):
        return (self._window_size - 1, 0)


@dataclass
class LowerTriangularFromBottomRightLocalAttentionMask(_LastKeys, LowerTriangularFromBottomRightMask):
    """Causal bottom-right, each query sees its last _window_size keys."""
    _window_size: int


@dataclass
class LocalAttentionFromBottomRightMask(AttentionBias):
    """Query i sees keys i + N - M - window_left .. i + N - M + window_right."""
    window_left: int
    window_right: int
    _align = "bottom-right"

    def __post_init__(self):
        for name in ("window_left", "window_right"):
            if getattr(self, name) < 0:
                raise ValueError("%s = %d: expected >= 0" % (name, getattr(self, name)))

    @property
    def _window(self):
        return (self.window_left, self.window_right)
