"""xformers.ops.memory_efficient_attention on top of sdpa (torch tensors).

    memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None)

Inputs [B, M, H, K] (also [B, M, K]: one head; and [B, M, G, H, K]: grouped
heads, k/v expanded over H as xformers wants them for GQA); output [B, M, H, Kv].

attn_bias:
  a tensor, broadcastable to [B, H, M, N] (stride-0 / size-1 dimensions are
      passed as broadcasts, never materialised), gradients flow into it;
  LowerTriangularMask()                   causal, top-left (xformers' convention);
  LowerTriangularFromBottomRightMask()    causal, bottom-right;
  LowerTriangularMask().add_bias(t)       causal top-left plus a tensor;
  LocalAttentionFromBottomRightMask(l, r) window (l, r), bottom-right;
  BlockDiagonalMask.from_seqlens(q_seqlen, kv_seqlen=None)
      varlen: inputs have batch 1 and the sequences concatenated along M; maps
      to cu_seqlens. .make_causal() (top-left in each block),
      .make_causal_from_bottomright(), .make_local_attention(window_size).

The same classes are importable as xformers.ops.fmha.attn_bias.* through the shim
python/xformers_shim (PYTHONPATH=python/xformers_shim).
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from . import torch_ops

__all__ = [
    "memory_efficient_attention", "AttentionBias", "LowerTriangularMask",
    "LowerTriangularFromBottomRightMask", "LowerTriangularMaskWithTensorBias",
    "LocalAttentionFromBottomRightMask", "BlockDiagonalMask", "BlockDiagonalCausalMask",
    "BlockDiagonalCausalFromBottomRightMask", "BlockDiagonalCausalLocalAttentionMask",
    "SeqLenInfo",
]


# ---- attention biases ------------------------------------------------------------------

class AttentionBias:
    """Base class of the structured biases (never materialised by sdpa)."""

    # how the bias maps onto sdpa: causal / align / window / tensor bias
    _causal = False
    _align = "top-left"
    _window = (-1, -1)

    def _tensor(self):
        return None

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        """The dense additive bias of shape [..., M, N] (0 or -inf), for testing."""
        m, n = shape[-2], shape[-1]
        i = torch.arange(m, device=device)[:, None]
        j = torch.arange(n, device=device)[None, :]
        off = (n - m) if self._align == "bottom-right" else 0
        left, right = self._window
        if self._causal:
            right = 0
        keep = torch.ones(m, n, dtype=torch.bool, device=device)
        if left >= 0:
            keep &= j >= i + off - left
        if right >= 0:
            keep &= j <= i + off + right
        full = torch.zeros(m, n, dtype=dtype, device=device)
        full = full.masked_fill(~keep, float("-inf"))
        t = self._tensor()
        if t is not None:
            full = full + t.to(dtype)
        return full.expand(shape) if t is None else full.expand(shape).clone()


class LowerTriangularMask(AttentionBias):
    """Causal mask, top-left aligned: query i sees keys j <= i."""
    _causal = True

    def add_bias(self, bias):
        return LowerTriangularMaskWithTensorBias(bias)


class LowerTriangularFromBottomRightMask(AttentionBias):
    """Causal mask, bottom-right aligned: query i sees keys j <= i + N - M."""
    _causal = True
    _align = "bottom-right"


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    """LowerTriangularMask plus an additive tensor bias (broadcastable to [B, H, M, N])."""

    def __init__(self, bias):
        self._bias = bias

    def _tensor(self):
        return self._bias


@dataclass
class LocalAttentionFromBottomRightMask(AttentionBias):
    """Window attention: query i sees keys i + N - M - window_left ..
    i + N - M + window_right."""
    window_left: int
    window_right: int

    @property
    def _window(self):
        return (self.window_left, self.window_right)

    _align = "bottom-right"


@dataclass
class SeqLenInfo:
    seqstart_py: List[int]
    max_seqlen: int
    seqstart: torch.Tensor

    @classmethod
    def from_seqlens(cls, seqlens: Sequence[int]):
        starts = [0]
        for n in seqlens:
            starts.append(starts[-1] + int(n))
        return cls(seqstart_py=starts, max_seqlen=max([int(n) for n in seqlens] or [0]),
                   seqstart=torch.tensor(starts, dtype=torch.int32))

    def split(self, x, batch_sizes=None):
        return [x[:, self.seqstart_py[i]:self.seqstart_py[i + 1]]
                for i in range(len(self.seqstart_py) - 1)]


@dataclass
class BlockDiagonalMask(AttentionBias):
    """Sequences of different lengths concatenated along M (batch 1): query block
    b attends to key block b only. Maps to sdpa's varlen layout (cu_seqlens)."""
    q_seqinfo: SeqLenInfo
    k_seqinfo: SeqLenInfo
    _batch_sizes: Optional[Sequence[int]] = None

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_seqlen: Optional[Sequence[int]] = None):
        q_info = SeqLenInfo.from_seqlens(q_seqlen)
        k_info = q_info if kv_seqlen is None else SeqLenInfo.from_seqlens(kv_seqlen)
        if len(q_info.seqstart_py) != len(k_info.seqstart_py):
            raise ValueError("q_seqlen and kv_seqlen must have the same number of sequences")
        return cls(q_seqinfo=q_info, k_seqinfo=k_info)

    def _derive(self, kind, **extra):
        return kind(q_seqinfo=self.q_seqinfo, k_seqinfo=self.k_seqinfo, **extra)

    def make_causal(self):
        return self._derive(BlockDiagonalCausalMask)

    def make_causal_from_bottomright(self):
        return self._derive(BlockDiagonalCausalFromBottomRightMask)

    def make_local_attention(self, window_size: int):
        return BlockDiagonalCausalLocalAttentionMask(q_seqinfo=self.q_seqinfo,
                                                     k_seqinfo=self.k_seqinfo,
                                                     _window_size=window_size)

    def split(self, x):
        return self.q_seqinfo.split(x)

    def split_queries(self, x):
        return self.q_seqinfo.split(x)

    def split_kv(self, x):
        return self.k_seqinfo.split(x)

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        full = torch.full(shape[-2:], float("-inf"), dtype=dtype, device=device)
        qs, ks = self.q_seqinfo.seqstart_py, self.k_seqinfo.seqstart_py
        for b in range(len(qs) - 1):
            m, n = qs[b + 1] - qs[b], ks[b + 1] - ks[b]
            blk = AttentionBias.materialize(self, (m, n), dtype, device)
            full[qs[b]:qs[b + 1], ks[b]:ks[b + 1]] = blk
        return full.expand(shape)


@dataclass
class BlockDiagonalCausalMask(BlockDiagonalMask):
    """Block diagonal, causal top-left inside each block."""
    _causal = True


@dataclass
class BlockDiagonalCausalFromBottomRightMask(BlockDiagonalMask):
    """Block diagonal, causal bottom-right inside each block."""
    _causal = True
    _align = "bottom-right"


@dataclass
class BlockDiagonalCausalLocalAttentionMask(BlockDiagonalMask):
    """Block diagonal, causal top-left with a window of _window_size keys
    (query i sees keys i - _window_size + 1 .. i)."""
    _window_size: int = 0
    _causal = True

    @property
    def _window(self):
        return (self._window_size - 1, 0)


# ---- the op ----------------------------------------------------------------------------

def _seed(p):
    if not p:
        return 0
    return int(torch.randint(0, 1 << 62, (1,), dtype=torch.int64).item())


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *,
                               op=None, output_dtype=None):
    """query [B, M, H, K], key [B, N, H_k, K], value [B, N, H_k, Kv] -> [B, M, H, Kv].
    op is accepted and ignored (sdpa picks its own kernel)."""
    if output_dtype is not None and output_dtype != query.dtype:
        raise NotImplementedError("sdpa: output_dtype other than the input dtype")
    ndim = query.ndim
    shape5 = tuple(query.shape)
    if ndim == 3:  # [B, M, K]: one head
        query, key, value = query[:, :, None], key[:, :, None], value[:, :, None]
    elif ndim == 5:  # [B, M, G, H, K]: k/v expanded over H -> h_k = G
        B, M, G, H, K = query.shape
        query = query.reshape(B, M, G * H, K)
        key = key[:, :, :, 0]
        value = value[:, :, :, 0]
    elif ndim != 4:
        raise ValueError("query: rank %d; expected [B, M, H, K] (or [B, M, K], [B, M, G, H, K])"
                         % ndim)

    kw = dict(scale=scale, dropout_p=p, seed=_seed(p))
    bias = attn_bias
    if attn_bias is None:
        pass
    elif isinstance(attn_bias, torch.Tensor):
        kw["bias"] = attn_bias
    elif isinstance(attn_bias, AttentionBias):
        kw.update(causal=attn_bias._causal, align=attn_bias._align, window=attn_bias._window,
                  bias=attn_bias._tensor())
        if isinstance(attn_bias, BlockDiagonalMask):
            if query.shape[0] != 1:
                raise ValueError("BlockDiagonalMask: expected inputs of batch 1 (sequences "
                                 "concatenated along M), got batch %d" % query.shape[0])
            dev = query.device
            kw.update(cu_seqlens_q=attn_bias.q_seqinfo.seqstart.to(dev),
                      cu_seqlens_k=attn_bias.k_seqinfo.seqstart.to(dev),
                      max_seqlen_q=attn_bias.q_seqinfo.max_seqlen,
                      max_seqlen_k=attn_bias.k_seqinfo.max_seqlen)
            out = torch_ops.attention(query[0], key[0], value[0], **kw)[None]
            return _unshape(out, ndim, shape5)
    else:
        raise NotImplementedError("sdpa: attn_bias of type %s" % type(bias).__name__)
    out = torch_ops.attention(query, key, value, **kw)
    return _unshape(out, ndim, shape5)


def _unshape(out, ndim, shape5):
    if ndim == 3:
        return out[:, :, 0]
    if ndim == 5:
        B, M, G, H, _ = shape5
        return out.reshape(B, M, G, H, out.shape[-1])
    return out
