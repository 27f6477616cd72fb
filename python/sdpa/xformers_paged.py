"""xformers' paged and gappy-keys masks over sdpa's paged varlen keys: key
block i read through a block table (pages of the cache), or through a table of
single rows (gappy keys: blocks at any, possibly overlapping, starts)."""
import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from .xformers_base import AttentionBias
from .xformers_blockdiag import (BlockDiagonalCausalWithOffsetPaddedKeysMask,
                                 BlockDiagonalPaddedKeysMask, PaddedSeqLenInfo, SeqLenInfo,
                                 _varlen_args)

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

    def to(self, device):
        """This bias with its infos (and block_tables) on device."""
        moved = dict(q_seqinfo=self.q_seqinfo.to(device), k_seqinfo=self.k_seqinfo.to(device))
        if hasattr(self, "block_tables"):
            moved["block_tables"] = self.block_tables.to(device)
        return dataclasses.replace(self, **moved)

    def _table(self, device):
        """block_table of the sdpa call: pages for _page_size > 1, else rows."""
        rows = self._rows()
        width = max([len(r) for r in rows] + [1])
        return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32,
                            device=device)

    def _key_rows(self, device):
        return torch.tensor([j for r in self._rows() for j in r], dtype=torch.long, device=device)

    def _sdpa_args(self, device):
        """Varlen keys of each block's length, read through _table."""
        kw = AttentionBias._sdpa_args(self, device)
        keys = SeqLenInfo.from_seqlens(self.k_seqinfo.seqlen_py, device=device)
        kw.update(_varlen_args(self.q_seqinfo, keys, device), block_table=self._table(device))
        return kw

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        """[..., M, N]: block i's mask (this class' mask) at its rows (paged:
        N = pages * page_size, the physical rows)."""
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

    def _rows(self):
        ps, tables = self.page_size, self.block_tables.tolist()
        return [[tables[b][j // ps] * ps + j % ps for j in range(n)]
                for b, n in enumerate(self.k_seqinfo.seqlen_py)]

    def _table(self, device):
        return self.block_tables.to(device=device, dtype=torch.int32)


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

    def _rows(self):
        return [list(range(a, b)) for a, b in self.k_seqinfo.intervals()]

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

    def _rows(self):
        ps, tables = self.page_size, self.block_tables.tolist()
        return [[tables[b][(st + j) // ps] * ps + (st + j) % ps for j in range(n)]
                for b, (st, n) in enumerate(zip(self.k_seqinfo.seqstart_py,
                                                self.k_seqinfo.seqlen_py))]
