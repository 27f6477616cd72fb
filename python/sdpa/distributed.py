"""Context parallelism: attention over a sequence split across the GPUs of a
torch.distributed process group (ring attention: sdpa_ring_fwd / sdpa_ring_bwd
of include/sdpa_ring.h, over NCCL).

    import sdpa.distributed as sd
    q_loc, k_loc, v_loc = (sd.shard(x, group) for x in (q, k, v))    # this rank's rows
    out_loc = sd.ring_attention(q_loc, k_loc, v_loc, group=group, causal=True)
    out = sd.gather(out_loc, group)                                   # the whole sequence

Each rank holds the rows sdpa_ring_shard names: with layout="zigzag" (the
default) chunks r and 2n-1-r of 2n, which gives every rank the same causal
work; with "contiguous" chunk r of n. Any length splits (the first chunks take
one row more); pass seqlen= when the split is uneven (the default is this
rank's rows times the ranks). q, k, v are [b, s_local, h | h_k, d] CUDA
tensors; the result is this rank's rows of attention over the whole sequence,
differentiable (q, k, v and, with return_lse, lse).

The ring runs on its own NCCL communicator, made the first time a group and
device are used (rank 0's unique id goes out through the group itself) and
kept for the process; destroy() releases it. Every rank of the group calls
ring_attention together, with the same shapes and keywords.
"""
from __future__ import annotations

import ctypes

from . import _core
from . import _lib
from . import _tensors as T
from ._lib import SdpaError, sdpa_attn, sdpa_tensor

_enum = ctypes.c_int

SDPA_RING_CONTIGUOUS = 0
SDPA_RING_ZIGZAG = 1
_LAYOUTS = {"contiguous": SDPA_RING_CONTIGUOUS, "zigzag": SDPA_RING_ZIGZAG}
_ID_BYTES = 128


# ---- ctypes mirror of sdpa_ring.h (tests/python/test_distributed.py checks the layout) ----

class sdpa_ring(ctypes.Structure):
    _fields_ = [
        ("nccl_comm", ctypes.c_void_p),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("layout", _enum),
        ("seqlen", ctypes.c_int64),
        ("comm_stream", ctypes.c_void_p),
        ("check_peers", ctypes.c_int),
        ("reserved", ctypes.c_int64 * 8),
    ]


# the fields both descriptors begin and end with, in the header's order
_RING_DESC_HEAD = [
    ("struct_size", ctypes.c_size_t),
    ("attn", sdpa_attn),
    ("ring", sdpa_ring),
    ("out", sdpa_tensor),
    ("lse", sdpa_tensor),
]
_RING_DESC_TAIL = [
    ("workspace", ctypes.c_void_p),
    ("workspace_size", ctypes.c_size_t),
]


class sdpa_ring_fwd_desc(ctypes.Structure):
    _fields_ = _RING_DESC_HEAD + _RING_DESC_TAIL


class sdpa_ring_bwd_desc(ctypes.Structure):
    _fields_ = _RING_DESC_HEAD + [
        ("dout", sdpa_tensor),
        ("dq", sdpa_tensor),
        ("dk", sdpa_tensor),
        ("dv", sdpa_tensor),
        ("dlse", sdpa_tensor),
        ("deterministic", ctypes.c_int),
    ] + _RING_DESC_TAIL


_declared = None


def _ring_lib():
    """libsdpa with the ring's calls declared (once)."""
    global _declared
    L = _lib.lib()
    if _declared is L:
        return L
    P = ctypes.POINTER
    sig = {
        "sdpa_ring_fwd_init": (None, [P(sdpa_ring_fwd_desc)]),
        "sdpa_ring_bwd_init": (None, [P(sdpa_ring_bwd_desc)]),
        "sdpa_ring_fwd": (_enum, [P(sdpa_ring_fwd_desc)]),
        "sdpa_ring_bwd": (_enum, [P(sdpa_ring_bwd_desc)]),
        "sdpa_ring_fwd_workspace_size": (_enum, [P(sdpa_ring_fwd_desc), P(ctypes.c_size_t)]),
        "sdpa_ring_bwd_workspace_size": (_enum, [P(sdpa_ring_bwd_desc), P(ctypes.c_size_t)]),
        "sdpa_ring_shard": (_enum, [ctypes.c_int64, ctypes.c_int, _enum, ctypes.c_int,
                                    P(ctypes.c_int64), P(ctypes.c_int64), P(ctypes.c_int)]),
        "sdpa_ring_available": (ctypes.c_int, []),
        "sdpa_ring_unique_id": (_enum, [ctypes.c_void_p, ctypes.c_size_t]),
        "sdpa_ring_comm_init": (_enum, [P(ctypes.c_void_p), ctypes.c_int, ctypes.c_void_p,
                                        ctypes.c_size_t, ctypes.c_int]),
        "sdpa_ring_comm_destroy": (_enum, [ctypes.c_void_p]),
    }
    try:
        _lib.declare(L, sig)
    except AttributeError as e:
        raise SdpaError(_lib.SDPA_ERR_NOT_SUPPORTED,
                        "%s has no ring (%s): rebuild libsdpa from this checkout"
                        % (_lib.library_path(), e))
    for cls, init in ((sdpa_ring_fwd_desc, L.sdpa_ring_fwd_init),
                      (sdpa_ring_bwd_desc, L.sdpa_ring_bwd_init)):
        size = _lib.init_struct_size(cls, init)
        if size != ctypes.sizeof(cls):
            raise SdpaError(_lib.SDPA_ERR_NOT_SUPPORTED,
                            "%s: %s is %d bytes there, %d in this binding: not a matching libsdpa"
                            % (_lib.library_path(), cls.__name__, size, ctypes.sizeof(cls)))
    _declared = L
    return L


def _new(cls):
    L = _ring_lib()
    d = cls()
    (L.sdpa_ring_fwd_init if cls is sdpa_ring_fwd_desc else L.sdpa_ring_bwd_init)(ctypes.byref(d))
    return d


def available():
    """True if the loaded libsdpa has the ring (CUDA, nccl.h at build time) and NCCL loads."""
    try:
        return bool(_ring_lib().sdpa_ring_available())
    except (OSError, SdpaError):
        return False


def _layout_code(layout):
    if isinstance(layout, int):
        return layout
    code = _LAYOUTS.get(str(layout).lower())
    if code is None:
        raise SdpaError(_lib.SDPA_ERR_INVALID_ARGUMENT,
                        "layout = %r: expected 'zigzag' or 'contiguous'" % (layout,))
    return code


def shard_bounds(seqlen, world_size, rank, layout="zigzag"):
    """The global rows rank holds, as [(start, stop), ...] in local order (sdpa_ring_shard)."""
    start = (ctypes.c_int64 * 2)()
    length = (ctypes.c_int64 * 2)()
    parts = ctypes.c_int(0)
    _lib.check(_ring_lib().sdpa_ring_shard(int(seqlen), int(world_size), _layout_code(layout),
                                           int(rank), start, length, ctypes.byref(parts)))
    return [(start[i], start[i] + length[i]) for i in range(parts.value)]


# ---- the process group ----------------------------------------------------------------------

def _dist():
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise SdpaError(_lib.SDPA_ERR_INVALID_ARGUMENT,
                        "group: torch.distributed is not initialised (init_process_group first)")
    return dist


def _group_of(group):
    dist = _dist()
    g = group if group is not None else dist.group.WORLD
    return dist, g, dist.get_rank(g), dist.get_world_size(g)


# (group, device index) -> (ncclComm_t, rank, world): one communicator each, for the process
_comms = {}


def _group_key(dist, g):
    name = getattr(g, "group_name", None)
    return name if name else id(g)


def _communicator(group, device_index):
    import torch
    dist, g, rank, world = _group_of(group)
    key = (_group_key(dist, g), device_index)
    got = _comms.get(key)
    if got is not None:
        return got
    L = _ring_lib()
    uid = ctypes.create_string_buffer(_ID_BYTES)
    with torch.cuda.device(device_index):
        if rank == 0:
            _lib.check(L.sdpa_ring_unique_id(uid, _ID_BYTES))
        box = [uid.raw if rank == 0 else None]
        try:
            dist.broadcast_object_list(box, group_src=0, group=g)
        except TypeError:  # torch < 2.6: src is a global rank
            dist.broadcast_object_list(box, src=dist.get_global_rank(g, 0), group=g)
        ctypes.memmove(uid, box[0], _ID_BYTES)
        comm = ctypes.c_void_p()
        _lib.check(L.sdpa_ring_comm_init(ctypes.byref(comm), world, uid, _ID_BYTES, rank))
    got = (comm.value, rank, world)
    _comms[key] = got
    return got


def destroy(group=None):
    """Releases the communicators ring_attention made (of one group, or all)."""
    L = _ring_lib()
    keys = list(_comms)
    if group is not None:
        dist, g, _, _ = _group_of(group)
        keys = [k for k in keys if k[0] == _group_key(dist, g)]
    for k in keys:
        comm = _comms.pop(k)[0]
        _lib.check(L.sdpa_ring_comm_destroy(comm))


# ---- the calls --------------------------------------------------------------------------------

class _Opts:
    __slots__ = ("group", "causal", "scale", "softcap", "align", "window", "alibi_slopes",
                 "bias", "dropout_p", "seed", "offset", "layout", "seqlen", "deterministic",
                 "kernel", "check_peers")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def _prepare(cls, q, k, v, o):
    """The descriptor with attn and ring filled; (desc, call, device index)."""
    c = _core._Call(q, "q")
    c.keep.append(q)
    k, v = c.arr(k, "k"), c.arr(v, "v")
    if c.dev[0] != T.CUDA:
        raise SdpaError(_lib.SDPA_ERR_NOT_SUPPORTED,
                        "q: on %s; ring_attention runs on CUDA tensors (NCCL between GPUs)"
                        % T.describe_device(c.dev))
    if q.dim() != 4:
        raise SdpaError(_lib.SDPA_ERR_INVALID_ARGUMENT,
                        "q: rank %d; expected [b, s_local, h, d]" % q.dim())
    comm, rank, world = _communicator(o.group, c.dev[1])
    d = _new(cls)
    d.attn.device = c.dev[0]
    _core._fill_attn(c, d.attn, q, k, v, causal=o.causal, align=o.align, window=o.window,
                     softcap=o.softcap, scale=o.scale, alibi_slopes=o.alibi_slopes, bias=o.bias,
                     dropout_p=o.dropout_p, seed=o.seed, offset=o.offset, cu_seqlens_q=None,
                     cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, seqused_k=None,
                     num_threads=0, kernel=o.kernel)
    r = d.ring
    r.nccl_comm = comm
    r.rank = rank
    r.world_size = world
    r.layout = _layout_code(o.layout)
    r.seqlen = int(o.seqlen) if o.seqlen is not None else int(q.shape[1]) * world
    r.check_peers = 1 if o.check_peers else 0
    return d, c


def _run(fn, size_fn, d, c, like):
    """fn(&d) on c's device, with a workspace from torch's allocator."""
    import torch
    n = ctypes.c_size_t(0)
    with torch.cuda.device(c.dev[1]):
        _lib.check(size_fn(ctypes.byref(d), ctypes.byref(n)))
        ws = torch.empty(max(n.value, 1), dtype=torch.uint8, device=like.device)
        d.workspace = ws.data_ptr() if n.value else None
        d.workspace_size = n.value
        _lib.check(fn(ctypes.byref(d)))
    del ws  # torch orders the block's reuse after the call on this stream


def _forward(q, k, v, o):
    import torch
    d, c = _prepare(sdpa_ring_fwd_desc, q, k, v, o)
    b, s, h, dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
    out = q.new_empty((b, s, h, dv))
    lse = q.new_empty((b, h, s), dtype=torch.float32)
    T.fill(d.out, out, "out")
    T.fill(d.lse, lse, "lse")
    L = _ring_lib()
    _run(L.sdpa_ring_fwd, L.sdpa_ring_fwd_workspace_size, d, c, q)
    return out, lse


def _backward(dout, dlse, q, k, v, out, lse, o):
    d, c = _prepare(sdpa_ring_bwd_desc, q, k, v, o)
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
    for t, x, name in ((d.out, out, "out"), (d.lse, lse, "lse"), (d.dout, dout, "dout"),
                       (d.dq, dq, "dq"), (d.dk, dk, "dk"), (d.dv, dv, "dv")):
        T.fill(t, c.arr(x, name), name)
    if dlse is not None:
        T.fill(d.dlse, c.arr(dlse, "dlse"), "dlse")
    if o.deterministic:
        d.deterministic = 1
    L = _ring_lib()
    _run(L.sdpa_ring_bwd, L.sdpa_ring_bwd_workspace_size, d, c, q)
    return dq, dk, dv


_Function = None


def _function():
    """The autograd Function (built on first use: importing sdpa needs no torch)."""
    global _Function
    if _Function is not None:
        return _Function
    import torch

    class RingAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, o):
            out, lse = _forward(q, k, v, o)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.o = o
            # an unused output's gradient stays None: a zero dlse would send
            # every block to the backward rows that take dlse (slower)
            ctx.set_materialize_grads(False)
            return out, lse

        @staticmethod
        def backward(ctx, dout, dlse):
            q, k, v, out, lse = ctx.saved_tensors
            if dout is None:
                dout = torch.zeros_like(out)
            dq, dk, dv = _backward(dout.contiguous(), None if dlse is None else dlse.contiguous(),
                                   q, k, v, out, lse, ctx.o)
            return dq, dk, dv, None

    _Function = RingAttention
    return _Function


def ring_attention(q, k, v, group=None, causal=False, *, scale=None, softcap=0.0,
                   align="bottom-right", window=(-1, -1), alibi_slopes=None, bias=None,
                   dropout_p=0.0, seed=0, offset=0, return_lse=False, layout="zigzag",
                   seqlen=None, deterministic=False, kernel=None, check_peers=True):
    """Attention of this rank's queries to the whole sequence, split across `group`.

    q [b, s_local, h, d], k / v [b, s_local, h_k, d | d_v]: this rank's rows (shard()
    gives them). Returns this rank's rows of out [b, s_local, h, d_v], and with
    return_lse its lse f32 [b, h, s_local] over the whole sequence. The keywords are
    sdpa.forward's where they apply (causal, scale, softcap, kernel); the ring refuses
    a bias, ALiBi, dropout and windows (SdpaError names the field). layout: 'zigzag'
    or 'contiguous'; seqlen: the whole sequence's length (default s_local * ranks);
    check_peers: every call first checks that all ranks agree (one small all-gather).
    """
    import torch
    o = _Opts(group=group, causal=causal, scale=scale, softcap=softcap, align=align,
              window=window, alibi_slopes=alibi_slopes, bias=bias, dropout_p=dropout_p,
              seed=seed, offset=offset, layout=layout, seqlen=seqlen,
              deterministic=deterministic, kernel=kernel, check_peers=check_peers)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = _function().apply(q, k, v, o)
    else:
        out, lse = _forward(q, k, v, o)
    return (out, lse) if return_lse else out


# ---- rows in and out of the split --------------------------------------------------------------

def shard(x, group=None, layout="zigzag", dim=1, seqlen=None):
    """This rank's rows of x (the whole sequence along dim), in local order (a copy)."""
    import torch
    _, _, rank, world = _group_of(group)
    n = x.shape[dim] if seqlen is None else seqlen
    return torch.cat([x.narrow(dim, a, b - a) for a, b in shard_bounds(n, world, rank, layout)],
                     dim=dim).contiguous()


def gather(x, group=None, layout="zigzag", dim=1, seqlen=None):
    """The whole sequence from every rank's rows x (the inverse of shard)."""
    import torch
    dist, g, rank, world = _group_of(group)
    n = x.shape[dim] * world if seqlen is None else int(seqlen)
    bounds = [shard_bounds(n, world, r, layout) for r in range(world)]
    longest = max(sum(b - a for a, b in bs) for bs in bounds)
    pad = list(x.shape)
    pad[dim] = longest - x.shape[dim]
    padded = torch.cat([x, x.new_zeros(pad)], dim=dim) if pad[dim] else x.contiguous()
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded, group=g)
    shape = list(x.shape)
    shape[dim] = n
    full = x.new_empty(shape)
    for r in range(world):
        at = 0
        for a, b in bounds[r]:
            full.narrow(dim, a, b - a).copy_(parts[r].narrow(dim, at, b - a))
            at += b - a
    return full
