"""xformers' attention-bias classes (xformers.ops.fmha.attn_bias, 0.0.28) over sdpa.

Each class says how it maps onto one sdpa call (_sdpa_args): a mask alignment
and window, an additive tensor, or the varlen layout (cu_seqlens_q / _k, with
seqused_k for padded keys). materialize() builds the dense additive bias (0 or
-inf, plus any tensor) for reference code and tests, as xformers does. Nothing
here computes attention.

The paged and gappy-keys masks use sdpa's paged varlen keys (a block table of
pages, or of single rows for keys at arbitrary starts).
"""
import math
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import torch

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


@dataclass
class LowerTriangularFromBottomRightLocalAttentionMask(LowerTriangularFromBottomRightMask):
    """Causal bottom-right, each query sees its last _window_size keys."""
    _window_size: int

    def __post_init__(self):
        if self._window_size <= 0:
            raise ValueError("window_size = %d: expected > 0" % self._window_size)

    @property
    def _window(self):
        return (self._window_size - 1, 0)


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


# ---- sequence layouts (varlen) ------------------------------------------------------------

@dataclass
class SeqLenInfo:
    """Sequences concatenated along M: sequence i is rows seqstart[i] .. seqstart[i+1]."""
    seqstart: torch.Tensor
    max_seqlen: int
    min_seqlen: int
    seqstart_py: List[int]

    @classmethod
    def from_seqlens(cls, seqlens: Iterable[int], *, device=None):
        lens = [int(n) for n in seqlens]
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        return cls(seqstart=torch.tensor(starts, dtype=torch.int32, device=device or "cpu"),
                   max_seqlen=max(lens, default=-1), min_seqlen=min(lens, default=-1),
                   seqstart_py=starts)

    def to(self, device):
        if self.seqstart.device == torch.device(device):
            return self
        return SeqLenInfo(seqstart=self.seqstart.to(device), max_seqlen=self.max_seqlen,
                          min_seqlen=self.min_seqlen, seqstart_py=self.seqstart_py)

    def intervals(self) -> Iterable[Tuple[int, int]]:
        return zip(self.seqstart_py, self.seqstart_py[1:])

    def split(self, x, batch_sizes: Optional[Sequence[int]] = None):
        if x.shape[0] != 1 or x.shape[1] != self.seqstart_py[-1]:
            raise ValueError("split: tensor of shape %s: expected [1, %d, ...]"
                             % (list(x.shape), self.seqstart_py[-1]))
        if batch_sizes is None:
            batch_sizes = [1] * (len(self.seqstart_py) - 1)
        chunks, at = [], 0
        for bs in batch_sizes:
            chunks.append(self.seqstart_py[at + bs] - self.seqstart_py[at])
            at += bs
        return [t.reshape(bs, -1, *t.shape[2:])
                for bs, t in zip(batch_sizes, x.split(chunks, dim=1))]


@dataclass
class PaddedSeqLenInfo(SeqLenInfo):
    """Sequence i owns rows i * padding .. (i+1) * padding, of which the first
    seqlen[i] are used."""
    seqlen: torch.Tensor = None
    seqlen_py: Sequence[int] = ()
    padding: int = 0

    @classmethod
    def from_seqlens_padded(cls, seqlens: Sequence[int], padding: int, *, device=None):
        lens = [int(n) for n in seqlens]
        if any(n > padding for n in lens):
            raise ValueError("seqlens %s: expected each <= padding = %d" % (lens, padding))
        dev = device or "cpu"
        starts = list(range(0, len(lens) * padding + 1, padding))
        return cls(seqstart=torch.tensor(starts, dtype=torch.int32, device=dev),
                   max_seqlen=max(lens, default=-1), min_seqlen=min(lens, default=-1),
                   seqstart_py=starts, seqlen=torch.tensor(lens, dtype=torch.int32, device=dev),
                   seqlen_py=lens, padding=padding)

    def to(self, device):
        if self.seqlen.device == torch.device(device):
            return self
        return PaddedSeqLenInfo(seqstart=self.seqstart.to(device), max_seqlen=self.max_seqlen,
                                min_seqlen=self.min_seqlen, seqstart_py=self.seqstart_py,
                                seqlen=self.seqlen.to(device), seqlen_py=self.seqlen_py,
                                padding=self.padding)

    def intervals(self):
        return ((s, s + n) for s, n in zip(self.seqstart_py, self.seqlen_py))

    def split(self, x, batch_sizes=None):
        raise NotImplementedError("PaddedSeqLenInfo.split")


def _varlen_args(q_info, k_info, device):
    kw = dict(cu_seqlens_q=q_info.seqstart.to(device), cu_seqlens_k=k_info.seqstart.to(device),
              max_seqlen_q=max(q_info.max_seqlen, 0), max_seqlen_k=max(k_info.max_seqlen, 0))
    if isinstance(k_info, PaddedSeqLenInfo):
        kw["seqused_k"] = k_info.seqlen.to(device)
        kw["max_seqlen_k"] = k_info.padding
    return kw


class _BlockDiagonalBase(AttentionBias):
    """Batch 1, sequences concatenated along M (queries) and N (keys): block i
    of the queries sees block i of the keys only. sdpa's varlen layout."""

    _varlen = True

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        if shape[-2] != self.q_seqinfo.seqstart_py[-1] or shape[-1] != self.k_seqinfo.seqstart_py[-1]:
            raise ValueError("materialize: shape %s: expected [..., %d, %d]"
                             % (list(shape), self.q_seqinfo.seqstart_py[-1],
                                self.k_seqinfo.seqstart_py[-1]))
        full = torch.full(tuple(shape[-2:]), -math.inf, dtype=dtype, device=device)
        for (q0, q1), (k0, k1) in zip(self.q_seqinfo.intervals(), self.k_seqinfo.intervals()):
            full[q0:q1, k0:k1] = self._block(q1 - q0, k1 - k0, dtype, device)
        return full.expand(shape)

    def _sdpa_args(self, device):
        kw = AttentionBias._sdpa_args(self, device)
        kw.update(_varlen_args(self.q_seqinfo, self.k_seqinfo, device))
        return kw


@dataclass
class BlockDiagonalMask(_BlockDiagonalBase):
    q_seqinfo: SeqLenInfo
    k_seqinfo: SeqLenInfo
    _batch_sizes: Optional[Sequence[int]] = None

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_seqlen: Optional[Sequence[int]] = None, *,
                     device=None):
        if kv_seqlen is not None and len(kv_seqlen) != len(q_seqlen):
            raise ValueError("q_seqlen and kv_seqlen: %d and %d sequences: expected the same "
                             "number" % (len(q_seqlen), len(kv_seqlen)))
        q_info = SeqLenInfo.from_seqlens(q_seqlen, device=device)
        same = kv_seqlen is None or list(kv_seqlen) == list(q_seqlen)
        k_info = q_info if same else SeqLenInfo.from_seqlens(kv_seqlen, device=device)
        return cls(q_seqinfo=q_info, k_seqinfo=k_info)

    @classmethod
    def from_tensor_list(cls, tensors: Sequence[torch.Tensor]):
        """(bias, [1, sum of lengths, ...] concatenation) of tensors [B_i, M_i, ...]."""
        lens = [x.shape[1] for x in tensors for _ in range(x.shape[0])]
        bias = cls.from_seqlens(lens)
        bias._batch_sizes = [x.shape[0] for x in tensors]
        return bias, torch.cat([x.reshape(1, -1, *x.shape[2:]) for x in tensors], dim=1)

    @classmethod
    def from_tensor_lists_qkv(cls, tensors_q, tensors_k, tensors_v=None):
        if len(tensors_q) != len(tensors_k) or (tensors_v is not None
                                                and len(tensors_v) != len(tensors_q)):
            raise ValueError("from_tensor_lists_qkv: expected lists of the same length")
        q_lens, k_lens = [], []
        for q, k in zip(tensors_q, tensors_k):
            if q.shape[0] != k.shape[0]:
                raise ValueError("from_tensor_lists_qkv: batch %d of a query tensor and %d of its "
                                 "key tensor: expected equal" % (q.shape[0], k.shape[0]))
            q_lens += [q.shape[1]] * q.shape[0]
            k_lens += [k.shape[1]] * k.shape[0]
        bias = cls.from_seqlens(q_lens, k_lens)
        bias._batch_sizes = [q.shape[0] for q in tensors_q]

        def cat(ts):
            return torch.cat([x.reshape(1, -1, *x.shape[2:]) for x in ts], dim=1)

        return bias, cat(tensors_q), cat(tensors_k), (cat(tensors_v) if tensors_v else None)

    def to(self, device):
        return type(self)(**{**self.__dict__, "q_seqinfo": self.q_seqinfo.to(device),
                             "k_seqinfo": self.k_seqinfo.to(device)})

    def split_queries(self, x):
        return self.q_seqinfo.split(x, self._batch_sizes)

    def split_kv(self, x):
        return self.k_seqinfo.split(x, self._batch_sizes)

    def split(self, x):
        if self.q_seqinfo is not self.k_seqinfo:
            raise ValueError("split: queries and keys have other lengths; use split_queries / "
                             "split_kv")
        return self.q_seqinfo.split(x, self._batch_sizes)

    def _derive(self, kind, **extra):
        return kind(q_seqinfo=self.q_seqinfo, k_seqinfo=self.k_seqinfo,
                    _batch_sizes=self._batch_sizes, **extra)

    def make_causal(self):
        return self._derive(BlockDiagonalCausalMask)

    def make_causal_from_bottomright(self):
        return self._derive(BlockDiagonalCausalFromBottomRightMask)

    def make_local_attention(self, window_size: int):
        return self._derive(BlockDiagonalCausalLocalAttentionMask, _window_size=window_size)

    def make_local_attention_from_bottomright(self, window_size: int):
        return self._derive(BlockDiagonalCausalLocalAttentionFromBottomRightMask,
                            _window_size=window_size)


@dataclass
class BlockDiagonalCausalMask(BlockDiagonalMask):
    """Block diagonal, causal top-left inside each block."""
    _causal = True


def _check_keys_cover_queries(bias):
    for i, ((q0, q1), (k0, k1)) in enumerate(zip(bias.q_seqinfo.intervals(),
                                                 bias.k_seqinfo.intervals())):
        if k1 - k0 < q1 - q0:
            raise ValueError("block %d has %d keys and %d queries: expected keys >= queries "
                             "(bottom-right causal)" % (i, k1 - k0, q1 - q0))


@dataclass
class BlockDiagonalCausalFromBottomRightMask(BlockDiagonalMask):
    """Block diagonal, causal bottom-right inside each block."""
    _causal = True
    _align = "bottom-right"

    def __post_init__(self):
        _check_keys_cover_queries(self)


@dataclass
class BlockDiagonalCausalLocalAttentionMask(BlockDiagonalCausalMask):
    """Block diagonal, causal top-left, each query sees its last _window_size keys."""
    _window_size: int = 0

    def __post_init__(self):
        if self._window_size <= 0:
            raise ValueError("window_size = %d: expected > 0" % self._window_size)

    @property
    def _window(self):
        return (self._window_size - 1, 0)


@dataclass
class BlockDiagonalCausalLocalAttentionFromBottomRightMask(BlockDiagonalCausalFromBottomRightMask):
    """Block diagonal, causal bottom-right, each query sees its last _window_size keys."""
    _window_size: int = 0

    def __post_init__(self):
        if self._window_size <= 0:
            raise ValueError("window_size = %d: expected > 0" % self._window_size)
        _check_keys_cover_queries(self)

    @property
    def _window(self):
        return (self._window_size - 1, 0)


@dataclass
class BlockDiagonalPaddedKeysMask(_BlockDiagonalBase):
    """Queries concatenated (batch 1); keys in slots of kv_padding rows, of which
    the first kv_seqlen[i] are used (sdpa: cu_seqlens_k in steps of the padding
    and seqused_k)."""
    q_seqinfo: SeqLenInfo
    k_seqinfo: PaddedSeqLenInfo

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_padding: int, kv_seqlen: Sequence[int],
                     causal_diagonal: Any = None, *, device=None):
        if len(q_seqlen) != len(kv_seqlen):
            raise ValueError("q_seqlen and kv_seqlen: %d and %d sequences: expected the same "
                             "number" % (len(q_seqlen), len(kv_seqlen)))
        return cls(q_seqinfo=SeqLenInfo.from_seqlens(q_seqlen, device=device),
                   k_seqinfo=PaddedSeqLenInfo.from_seqlens_padded(kv_seqlen, kv_padding,
                                                                  device=device))

    def to(self, device):
        return type(self)(**{**self.__dict__, "q_seqinfo": self.q_seqinfo.to(device),
                             "k_seqinfo": self.k_seqinfo.to(device)})

    def make_paged(self, block_tables, page_size, paged_type):
        info = PaddedSeqLenInfo.from_seqlens_padded(self.k_seqinfo.seqlen_py,
                                                    block_tables.shape[1] * page_size,
                                                    device=self.k_seqinfo.seqstart.device)
        return paged_type(q_seqinfo=self.q_seqinfo, k_seqinfo=info, block_tables=block_tables,
                          page_size=page_size)


@dataclass
class BlockDiagonalCausalWithOffsetPaddedKeysMask(BlockDiagonalPaddedKeysMask):
    """Padded keys, causal bottom-right inside each block (the used keys)."""
    causal_diagonal: Any = None
    _causal = True
    _align = "bottom-right"


@dataclass
class BlockDiagonalCausalLocalAttentionPaddedKeysMask(BlockDiagonalPaddedKeysMask):
    """Padded keys, causal bottom-right, each query sees its last _window_size keys."""
    _window_size: int = 0
    _causal = True
    _align = "bottom-right"

    @property
    def _window(self):
        return (self._window_size - 1, 0)

    @classmethod
    def from_seqlens_local(cls, q_seqlen, kv_padding, kv_seqlen, window_size):
        base = BlockDiagonalPaddedKeysMask.from_seqlens(q_seqlen, kv_padding, kv_seqlen)
        return cls(q_seqinfo=base.q_seqinfo, k_seqinfo=base.k_seqinfo, _window_size=window_size)


class _KeyRowsBias(AttentionBias):
    """A block-diagonal bias whose key blocks sdpa reads through a table
    (paged varlen): block i's keys are flat rows _rows()[i] of the [1, N, ...]
    keys, read in pages of _page_size rows (1: any rows). With gradients the
    rows are gathered instead (differentiable; sdpa's paged keys are forward
    only)."""

    _page_size = 1

    def _rows(self):
        """Flat key rows of each block (lists), for the row table and the gather."""
        raise NotImplementedError

    def _table(self, device):
        """block_table of the sdpa call: pages for _page_size > 1, else rows."""
        rows = self._rows()
        width = max([len(r) for r in rows] + [1])
        return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32,
                            device=device)

    def _key_rows(self, device):
        return torch.tensor([j for r in self._rows() for j in r], dtype=torch.long, device=device)

    def _sdpa_args(self, device):
        kw = AttentionBias._sdpa_args(self, device)
        lens = [len(r) for r in self._rows()]
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        kw.update(cu_seqlens_q=self.q_seqinfo.seqstart.to(device),
                  cu_seqlens_k=torch.tensor(cu, dtype=torch.int32, device=device),
                  max_seqlen_q=max(self.q_seqinfo.max_seqlen, 0),
                  max_seqlen_k=max(lens + [0]), block_table=self._table(device))
        return kw

    def _materialize_rows(self, shape, dtype, device):
        """[..., M, N]: block i's mask (this class' mask) at its rows."""
        full = torch.full(tuple(shape[-2:]), -math.inf, dtype=dtype, device=device)
        for (q0, q1), rows in zip(self.q_seqinfo.intervals(), self._rows()):
            if rows:
                full[q0:q1, torch.tensor(rows, device=device)] = self._block(q1 - q0, len(rows),
                                                                              dtype, device)
        return full.expand(shape)


@dataclass
class PagedBlockDiagonalPaddedKeysMask(_KeyRowsBias):
    """BlockDiagonalPaddedKeysMask over a paged cache: the keys are [1, pages *
    page_size, ...] and row i's keys are read through block_tables[i] (sdpa's
    paged varlen layout)."""
    q_seqinfo: SeqLenInfo
    k_seqinfo: PaddedSeqLenInfo
    block_tables: torch.Tensor
    page_size: int
    _UNPAGED_TYPE = BlockDiagonalPaddedKeysMask

    @classmethod
    def from_seqlens(cls, q_seqlen, kv_seqlen, block_tables, page_size, *, device=None):
        if len(q_seqlen) != len(kv_seqlen):
            raise ValueError("q_seqlen and kv_seqlen: %d and %d sequences: expected the same "
                             "number" % (len(q_seqlen), len(kv_seqlen)))
        dev = device or block_tables.device
        return cls(q_seqinfo=SeqLenInfo.from_seqlens(q_seqlen, device=dev),
                   k_seqinfo=PaddedSeqLenInfo.from_seqlens_padded(
                       kv_seqlen, block_tables.shape[1] * page_size, device=dev),
                   block_tables=block_tables, page_size=page_size)

    @property
    def _page_size(self):
        return self.page_size

    def to(self, device):
        return type(self)(q_seqinfo=self.q_seqinfo.to(device), k_seqinfo=self.k_seqinfo.to(device),
                          block_tables=self.block_tables.to(device), page_size=self.page_size)

    def _rows(self):
        ps, tables = self.page_size, self.block_tables.tolist()
        return [[tables[b][j // ps] * ps + j % ps for j in range(n)]
                for b, n in enumerate(self.k_seqinfo.seqlen_py)]

    def _table(self, device):
        return self.block_tables.to(device=device, dtype=torch.int32)

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        """[..., M, used pages * page_size], the mask at the physical rows."""
        return self._materialize_rows(shape, dtype, device)


@dataclass
class PagedBlockDiagonalCausalWithOffsetPaddedKeysMask(PagedBlockDiagonalPaddedKeysMask):
    """The paged form of BlockDiagonalCausalWithOffsetPaddedKeysMask."""
    _UNPAGED_TYPE = BlockDiagonalCausalWithOffsetPaddedKeysMask
    _causal = True
    _align = "bottom-right"


@dataclass
class GappySeqInfo(SeqLenInfo):
    """Key block i is rows seqstart[i] .. seqstart[i] + seqlen[i] (any starts,
    overlaps allowed); paged: starts inside each block-table row."""
    seqlen: torch.Tensor = None
    seqlen_py: Sequence[int] = ()

    @classmethod
    def from_seqlens_gappy(cls, seqstarts, seqlens, paged, *, device=None):
        lens = [int(n) for n in seqlens]
        if not lens:
            raise ValueError("no sequences")
        if len(seqstarts) - len(lens) != (0 if paged else 1):
            raise ValueError("%d seqstarts for %d seqlens: expected %s" % (
                len(seqstarts), len(lens), "as many" if paged else "one more"))
        dev = device or "cpu"
        return cls(seqstart=torch.tensor(list(seqstarts), dtype=torch.int32, device=dev),
                   max_seqlen=max(lens), min_seqlen=min(lens), seqstart_py=list(seqstarts),
                   seqlen=torch.tensor(lens, dtype=torch.int32, device=dev), seqlen_py=lens)

    def to(self, device):
        return GappySeqInfo(seqstart=self.seqstart.to(device), max_seqlen=self.max_seqlen,
                            min_seqlen=self.min_seqlen, seqstart_py=self.seqstart_py,
                            seqlen=self.seqlen.to(device), seqlen_py=self.seqlen_py)

    def intervals(self):
        return ((s, s + n) for s, n in zip(self.seqstart_py, self.seqlen_py))


@dataclass
class BlockDiagonalGappyKeysMask(_KeyRowsBias):
    """Queries concatenated (batch 1); key block i at rows kv_seqstarts[i] ..
    kv_seqstarts[i] + kv_seqlen[i] of the keys (sdpa: paged varlen keys with a
    table of rows)."""
    q_seqinfo: SeqLenInfo
    k_seqinfo: GappySeqInfo

    @classmethod
    def from_seqlens(cls, q_seqlen, kv_seqstarts, kv_seqlen, *, device=None):
        if len(q_seqlen) != len(kv_seqlen):
            raise ValueError("q_seqlen and kv_seqlen: %d and %d sequences: expected the same "
                             "number" % (len(q_seqlen), len(kv_seqlen)))
        return cls(q_seqinfo=SeqLenInfo.from_seqlens(q_seqlen, device=device),
                   k_seqinfo=GappySeqInfo.from_seqlens_gappy(kv_seqstarts, kv_seqlen, False,
                                                             device=device))

    def to(self, device):
        return type(self)(q_seqinfo=self.q_seqinfo.to(device), k_seqinfo=self.k_seqinfo.to(device))

    def _rows(self):
        return [list(range(a, b)) for a, b in self.k_seqinfo.intervals()]

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return self._materialize_rows(shape, dtype, device)

    def make_paged(self, block_tables, page_size, notional_padding, paged_type):
        starts = [st - i * notional_padding for i, st in enumerate(self.k_seqinfo.seqstart_py[:-1])]
        info = GappySeqInfo.from_seqlens_gappy(starts, self.k_seqinfo.seqlen_py, True,
                                               device=block_tables.device)
        return paged_type(q_seqinfo=self.q_seqinfo, k_seqinfo=info, block_tables=block_tables,
                          page_size=page_size)


@dataclass
class BlockDiagonalCausalWithOffsetGappyKeysMask(BlockDiagonalGappyKeysMask):
    """Gappy keys, causal bottom-right inside each block."""
    _causal = True
    _align = "bottom-right"


@dataclass
class PagedBlockDiagonalGappyKeysMask(_KeyRowsBias):
    """Gappy keys in a paged cache: block i's keys are logical rows
    kv_seqstarts[i] .. + kv_seqlen[i] of block-table row i."""
    q_seqinfo: SeqLenInfo
    k_seqinfo: GappySeqInfo
    block_tables: torch.Tensor
    page_size: int
    _UNPAGED_TYPE = BlockDiagonalGappyKeysMask

    @classmethod
    def from_seqlens(cls, q_seqlen, kv_seqstarts, kv_seqlen, block_tables, page_size, *,
                     device=None):
        dev = block_tables.device if device is None else device
        return cls(q_seqinfo=SeqLenInfo.from_seqlens(q_seqlen, device=dev),
                   k_seqinfo=GappySeqInfo.from_seqlens_gappy(kv_seqstarts, kv_seqlen, True,
                                                             device=dev),
                   block_tables=block_tables, page_size=page_size)

    def to(self, device):
        return type(self)(q_seqinfo=self.q_seqinfo.to(device), k_seqinfo=self.k_seqinfo.to(device),
                          block_tables=self.block_tables.to(device), page_size=self.page_size)

    def _rows(self):
        ps, tables = self.page_size, self.block_tables.tolist()
        return [[tables[b][(st + j) // ps] * ps + (st + j) % ps for j in range(n)]
                for b, (st, n) in enumerate(zip(self.k_seqinfo.seqstart_py,
                                                self.k_seqinfo.seqlen_py))]

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        return self._materialize_rows(shape, dtype, device)
