"""xformers' block-diagonal masks over sdpa's varlen layout: sequences
concatenated along M (batch 1), block i of the queries seeing block i of the
keys (cu_seqlens_q / _k), in every causal / local form, and the padded-keys
masks (key slots of a fixed size, of which the first kv_seqlen[i] are used:
seqused_k)."""
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import torch

from .xformers_base import AttentionBias, _LastKeys

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
        """This info with its tensors on device (itself when they are there)."""
        if self.seqstart.device == torch.device(device):
            return self
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **moved)

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

    def to(self, device):
        """This bias with its infos on device."""
        return dataclasses.replace(self, q_seqinfo=self.q_seqinfo.to(device),
                                   k_seqinfo=self.k_seqinfo.to(device))

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
class BlockDiagonalCausalLocalAttentionMask(_LastKeys, BlockDiagonalCausalMask):
    """Block diagonal, causal top-left, each query sees its last _window_size keys."""
    _window_size: int = 0


@dataclass
class BlockDiagonalCausalLocalAttentionFromBottomRightMask(_LastKeys,
                                                          BlockDiagonalCausalFromBottomRightMask):
    """Block diagonal, causal bottom-right, each query sees its last _window_size keys."""
    _window_size: int = 0


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
class BlockDiagonalCausalLocalAttentionPaddedKeysMask(_LastKeys, BlockDiagonalPaddedKeysMask):
    """Padded keys, causal bottom-right, each query sees its last _window_size keys."""
    _window_size: int = 0
    _causal = True
    _align = "bottom-right"

    @classmethod
    def from_seqlens_local(cls, q_seqlen, kv_padding, kv_seqlen, window_size):
        base = BlockDiagonalPaddedKeysMask.from_seqlens(q_seqlen, kv_padding, kv_seqlen)
        return cls(q_seqinfo=base.q_seqinfo, k_seqinfo=base.k_seqinfo, _window_size=window_size)
