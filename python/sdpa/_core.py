"""The core calls: forward, backward, merge_states, explain, kernels.

Each call fills the library's descriptor (initialised by sdpa_*_init, so
struct_size and every default come from the library), allocates the outputs
with the inputs' own library (torch.empty / numpy.empty, same device), and
raises SdpaError(status, sdpa_last_error()) on failure.

A small eager call is bound by this file's host time (issue 4: a decoding step
is ~10 us of GPU work), so the call path avoids what costs microseconds in
Python: the descriptor is a copy of a cached template (_lib.new_desc), arrays
are packed with struct (_tensors.fill), optional arguments left at None and
scalars at their defaults are not written, and no dict, generator or context
manager is built per call.
"""
from __future__ import annotations

import ctypes

from . import _lib
from . import _tensors as T
from ._lib import SdpaError

_EXPLAIN_BUF = 1 << 16


def _invalid(msg):
    return SdpaError(_lib.SDPA_ERR_INVALID_ARGUMENT, msg)


_ALIGN_CODES = {}
for _names, _code in ((("bottom-right", "br", "bottomright"), _lib.SDPA_ALIGN_BOTTOM_RIGHT),
                      (("top-left", "tl", "topleft"), _lib.SDPA_ALIGN_TOP_LEFT)):
    _ALIGN_CODES.update(dict.fromkeys(_names, _code))


def _align_code(align):
    if isinstance(align, int):
        return align
    code = _ALIGN_CODES.get(align)  # the spellings as written, no normalising
    if code is not None:
        return code
    a = str(align).lower().replace("_", "-").replace(" ", "-")
    if a in _ALIGN_CODES:
        return _ALIGN_CODES[a]
    raise _invalid("align = %r: expected 'bottom-right' or 'top-left'" % (align,))


def _window(window):
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise _invalid("window = %r: expected a pair (left, right), -1 = unbounded" % (window,))
    return int(left), int(right)


def _bias4(bias):
    """A bias of rank < 4 gets leading broadcast dimensions (views, no copy)."""
    while bias.ndim < 4:
        bias = bias[None]
    return bias


def _call(fn, desc, dev, size_fn=None, large_ws=False):
    """fn(&desc) with dev's CUDA device current (torch's, switched only if it is
    another: the library launches on the current device); raises on failure.
    size_fn: the call's workspace query (see _torch_workspace), asked on
    that device; large_ws: the call's workspace may pass the library pool's
    64 MB (every backward: the dQ accumulator, a summed dbias's full
    gradient). No contextlib on the usual path: a call's host cost counts
    (issue 4)."""
    if dev[0] == T.CUDA:
        torch = T._torch()
        if torch is not None and torch.cuda.current_device() != dev[1]:
            with torch.cuda.device(dev[1]):
                return _call_cuda(fn, desc, dev, size_fn, torch, large_ws)
        if torch is not None:
            return _call_cuda(fn, desc, dev, size_fn, torch, large_ws)
    return _lib.check(fn(ctypes.byref(desc)))


def _call_cuda(fn, desc, dev, size_fn, torch, large_ws=False):
    """_call on dev's device, current: with a workspace from torch inside a capture
    or where it may be large."""
    ws = _torch_workspace(size_fn, desc, dev, torch, large_ws) if size_fn is not None else None
    r = _lib.check(fn(ctypes.byref(desc)))
    del ws  # after the call: torch's allocator orders the block's reuse after it
    return r


class _Call:
    """Collects the adapted arrays of one call: keeps them alive, checks that they
    share one device, fills sdpa_tensor fields."""

    __slots__ = ("keep", "primary", "dev", "name")

    def __init__(self, primary, name):
        self.keep = []
        self.primary = primary
        self.dev = T.device_of(primary)
        self.name = name

    def arr(self, x, name, index=False):
        if x is None:
            return None
        x = T.as_array(x, name)
        if index:
            x = T.to_int32(x)
        dev = T.device_of(x)
        if dev != self.dev:
            raise _invalid("%s: on %s, but %s is on %s (every tensor of a call must be on one "
                           "device)" % (name, T.describe_device(dev), self.name,
                                        T.describe_device(self.dev)))
        self.keep.append(x)
        return x

    def set(self, t, x, name):
        if x is not None:
            T.fill(t, x, name)


def _seqlen_max(cu):
    """max(cu[i+1] - cu[i]) (a host sync for device arrays)."""
    if cu.shape[0] < 2:
        return 0
    d = cu[1:] - cu[:-1]
    return int(d.max())


def _fill_varlen(c, a, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k):
    """The varlen index arrays (called only when one is given: every other call
    skips them); returns (max_seqlen_q, max_seqlen_k), computed on CUDA."""
    cu_q = c.arr(cu_seqlens_q, "cu_seqlens_q", index=True)
    cu_k = c.arr(cu_seqlens_k, "cu_seqlens_k", index=True)
    c.set(a.cu_seqlens_q, cu_q, "cu_seqlens_q")
    c.set(a.cu_seqlens_k, cu_k, "cu_seqlens_k")
    c.set(a.seqused_k, c.arr(seqused_k, "seqused_k", index=True), "seqused_k")
    if c.dev[0] == T.CUDA:
        # the library computes missing maxima only on the CPU device
        if cu_q is not None and not max_seqlen_q:
            max_seqlen_q = _seqlen_max(cu_q)
        if cu_k is not None and not max_seqlen_k:
            max_seqlen_k = _seqlen_max(cu_k)
    return max_seqlen_q, max_seqlen_k


def _fill_attn(c, a, q, k, v, *, causal, align, window, softcap, scale, alibi_slopes, bias,
               dropout_p, seed, offset, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
               seqused_k, num_threads, kernel):
    if c.dev[0] != T.CPU:  # (the template's device is the CPU, with no stream)
        a.device = c.dev[0]
        a.stream = T.stream_of(c.dev)
    if num_threads:
        a.num_threads = int(num_threads)
    c.set(a.q, q, "q")
    c.set(a.k, k, "k")
    c.set(a.v, v, "v")
    if cu_seqlens_q is not None or cu_seqlens_k is not None or seqused_k is not None:
        max_seqlen_q, max_seqlen_k = _fill_varlen(c, a, cu_seqlens_q, cu_seqlens_k, seqused_k,
                                                  max_seqlen_q, max_seqlen_k)
    # new_desc's template holds what the keywords' defaults write (0, see
    # _lib._ATTN_KEYWORD_FIELDS): a scalar is written only where its keyword
    # differs (the conversions, and their errors, as before)
    if max_seqlen_q:
        a.max_seqlen_q = int(max_seqlen_q)
    if max_seqlen_k:
        a.max_seqlen_k = int(max_seqlen_k)
    if scale is not None:
        a.scale = float(scale)
    if softcap:
        a.softcap = float(softcap)
    if alibi_slopes is not None:
        c.set(a.alibi_slopes, c.arr(alibi_slopes, "alibi_slopes"), "alibi_slopes")
    if bias is not None:
        bias = _bias4(c.arr(bias, "bias"))
        c.keep.append(bias)
        T.fill(a.bias, bias, "bias")
    if causal:
        a.causal = 1
    a.align = _align_code(align)
    a.window_left, a.window_right = _window(window)
    if dropout_p:
        a.dropout_p = float(dropout_p)
    if seed != 0:
        a.dropout_seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    if offset != 0:
        a.dropout_offset = int(offset)
    if kernel:
        kb = kernel.encode() if isinstance(kernel, str) else bytes(kernel)
        c.keep.append(kb)
        a.kernel = kb
    return bias


def _fill_cache_extras(c, d, block_table, cache_batch_idx, k_new, v_new, rotary_cos,
                       rotary_sin, cache_leftpad):
    """The KV cache's optional arrays (called only when one is given)."""
    for t, x, name, index in ((d.block_table, block_table, "block_table", True),
                              (d.cache_batch_idx, cache_batch_idx, "cache_batch_idx", True),
                              (d.k_new, k_new, "k_new", False), (d.v_new, v_new, "v_new", False),
                              (d.rotary_cos, rotary_cos, "rotary_cos", False),
                              (d.rotary_sin, rotary_sin, "rotary_sin", False),
                              (d.cache_leftpad, cache_leftpad, "cache_leftpad", True)):
        c.set(t, c.arr(x, name, index=index), name)


def _rank_error(q, k, v):
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        if x.ndim < 3:
            return _invalid("%s: rank %d; expected [b, s, h, d] (dense, cache) or [total, h, d] "
                            "(varlen)" % (n, x.ndim))


def _out_shapes(q, v, varlen):
    """Shapes of out and lse (computed only when the call allocates them)."""
    h, d_v = q.shape[-2], v.shape[-1]
    if varlen:
        total_q = q.shape[0]
        return (total_q, h, d_v), (h, total_q)
    b, s_q = q.shape[0], q.shape[1]
    return (b, s_q, h, d_v), (b, h, s_q)


def _probs_shape(q, k, cu_seqlens_q=None, max_seqlen_q=0, max_seqlen_k=0):
    """Shape of probs: dense [b, h, s_q, s_k]; varlen [b, h, max_seqlen_q, max_seqlen_k]
    (b from cu_seqlens_q's length: also under torch's fake tensors)."""
    if cu_seqlens_q is not None:
        return (cu_seqlens_q.shape[0] - 1, q.shape[-2], int(max_seqlen_q), int(max_seqlen_k))
    return (q.shape[0], q.shape[-2], q.shape[1], k.shape[1])


def _build_fwd(q, k, v, *, causal=False, align="bottom-right", window=(-1, -1), softcap=0.0,
               scale=None, alibi_slopes=None, bias=None, dropout_p=0.0, seed=0, offset=0,
               return_lse=False, return_probs=False, cu_seqlens_q=None, cu_seqlens_k=None,
               max_seqlen_q=0, max_seqlen_k=0, seqused_k=None, cache_seqlens=None,
               block_table=None, cache_batch_idx=None, k_new=None, v_new=None, rotary_cos=None,
               rotary_sin=None, rotary_interleaved=False, num_splits=0, num_threads=0,
               kernel=None, out=None, lse=None, probs=None, cache_leftpad=None):
    q = T.as_array(q, "q")
    c = _Call(q, "q")
    c.keep.append(q)
    k = c.arr(k, "k")
    v = c.arr(v, "v")
    if q.ndim < 3 or k.ndim < 3 or v.ndim < 3:
        raise _rank_error(q, k, v)
    varlen = cu_seqlens_q is not None
    cache = cache_seqlens is not None
    if isinstance(cache_seqlens, int):
        cache_seqlens = T.int32_on(q, [cache_seqlens] * int(q.shape[0]))

    d = _lib.new_desc(_lib.sdpa_fwd_desc)
    _fill_attn(c, d.attn, q, k, v, causal=causal, align=align, window=window, softcap=softcap,
               scale=scale, alibi_slopes=alibi_slopes, bias=bias, dropout_p=dropout_p, seed=seed,
               offset=offset, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
               max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
               num_threads=num_threads, kernel=kernel)

    shapes = _out_shapes(q, v, varlen) if out is None or (return_lse and lse is None) else None
    if out is None:
        out = T.empty(q, shapes[0])
    else:
        out = c.arr(out, "out")
    c.set(d.out, out, "out")
    if return_lse or lse is not None:
        if lse is None:
            lse = T.empty(q, shapes[1], "float32")
        else:
            lse = c.arr(lse, "lse")
        c.set(d.lse, lse, "lse")
    if return_probs or probs is not None:
        if probs is None:
            if cache:
                raise SdpaError(_lib.SDPA_ERR_NOT_SUPPORTED,
                                "return_probs: the dense and varlen layouts only (no "
                                "cache_seqlens)")
            if varlen:  # past a sequence's lengths: 0
                # the maxima _fill_attn resolved (CUDA), else from the prefix sums
                cu_q = T.as_array(cu_seqlens_q, "cu_seqlens_q")
                mq = d.attn.max_seqlen_q or _seqlen_max(T.to_int32(cu_q))
                mk = d.attn.max_seqlen_k or _seqlen_max(
                    T.to_int32(T.as_array(cu_seqlens_k, "cu_seqlens_k")))
                probs = T.zeros(q, _probs_shape(q, k, cu_q, mq, mk), "float32")
            else:
                probs = T.empty(q, _probs_shape(q, k), "float32")
        else:
            probs = c.arr(probs, "probs")
        c.set(d.probs, probs, "probs")

    if cache:
        c.set(d.cache_seqlens, c.arr(cache_seqlens, "cache_seqlens", index=True), "cache_seqlens")
    if (block_table is not None or cache_batch_idx is not None or k_new is not None
            or v_new is not None or rotary_cos is not None or rotary_sin is not None
            or cache_leftpad is not None):
        _fill_cache_extras(c, d, block_table, cache_batch_idx, k_new, v_new, rotary_cos,
                           rotary_sin, cache_leftpad)
    if rotary_interleaved:
        d.rotary_interleaved = 1
    if num_splits:
        d.num_splits = int(num_splits)
    return d, c, out, lse, probs


def _torch_workspace(size_fn, desc, dev, torch, large=False):
    """Inside a CUDA graph capture on torch's current stream: the call's
    workspace from torch's allocator (the capture's private pool), so the
    graph holds no allocation and free nodes of the library's stream-ordered
    workspace (they slow a decoding step's replay). Eager calls keep the library's own
    allocation (no size query a call: a query and torch.empty cost ~10 us of
    host time a call), from its pool, which keeps the memory between calls,
    except where it may be large: the library's pool hands back what it holds
    above 64 MB at each synchronization and maps it again at the next call,
    where torch's allocator keeps its blocks for the process.
    The capture must be torch's (torch.cuda.graph, make_graphed_callables,
    torch.compile's CUDA graphs), as for any torch op that allocates: torch
    gives a capture it did not begin no private pool, so a block freed after
    the call would be reused while the graph still holds its address. None when not capturing or
    nothing is needed."""
    if not large and not torch.cuda.is_current_stream_capturing():
        return None
    n = ctypes.c_size_t(0)
    _lib.check(size_fn(ctypes.byref(desc), ctypes.byref(n)))
    if n.value == 0:
        return None
    ws = torch.empty(n.value, dtype=torch.uint8, device=torch.device("cuda", dev[1]))
    desc.workspace = ws.data_ptr()
    desc.workspace_size = n.value
    return ws


def _run_fwd(built, return_lse, return_probs):
    """One sdpa_fwd call on _build_fwd's result; forward()'s return value."""
    d, c, out, lse, probs = built
    L = _lib.lib()
    _call(L.sdpa_fwd, d, c.dev, L.sdpa_fwd_workspace_size)
    if not (return_lse or return_probs):
        return out
    res = (out, lse)
    if return_probs:
        res = res + (probs,)
    return res


def _forward_raw(q, k, v, **kw):
    """forward() without autograd: one sdpa_fwd call."""
    return _run_fwd(_build_fwd(q, k, v, **kw), kw.get("return_lse", False),
                    kw.get("return_probs", False))


def _needs_grad(tensors):
    """Grad mode on and one of tensors requiring grad (None and arrays without
    requires_grad, e.g. numpy's, never do); torch is imported. No generator,
    no dict: every eager call asks (here and in torch_ops)."""
    if not T._torch().is_grad_enabled():
        return False
    for x in tensors:
        if x is not None and getattr(x, "requires_grad", False):
            return True
    return False


def _wants_autograd(q, k, v, bias):
    """q a torch tensor, grad enabled and one of q, k, v, bias requiring it."""
    return T.is_torch(q) and _needs_grad((q, k, v, bias))


_CACHE_KEYS = ("cache_seqlens", "block_table", "cache_batch_idx", "cache_leftpad", "k_new",
               "v_new", "rotary_cos", "rotary_sin")


def forward(q, k, v, *, causal=False, align="bottom-right", window=(-1, -1), softcap=0.0,
            scale=None, alibi_slopes=None, bias=None, dropout_p=0.0, seed=0, offset=0,
            return_lse=False, return_probs=False, cu_seqlens_q=None, cu_seqlens_k=None,
            max_seqlen_q=0, max_seqlen_k=0, seqused_k=None, cache_seqlens=None, block_table=None,
            cache_batch_idx=None, k_new=None, v_new=None, rotary_cos=None, rotary_sin=None,
            rotary_interleaved=False, num_splits=0, num_threads=0, kernel=None, out=None,
            cache_leftpad=None):
    """Fused attention forward (sdpa_fwd). See include/sdpa.h for the semantics.

    Layouts: dense q [b, s_q, h, d], k [b, s_k, h_k, d], v [b, s_k, h_k, d_v];
    varlen (cu_seqlens_q/k given) q [total_q, h, d] ...; KV cache (cache_seqlens
    given, an int or int32 [b]) with k/v the cache, optionally paged (block_table)
    and appended to in place (k_new, v_new, rotary).

    Returns out, or (out, lse[, probs]) with return_lse / return_probs. lse is
    f32 [b, h, s_q] (varlen [h, total_q]); probs f32 [b, h, s_q, s_k].

    torch tensors that require grad (dense or varlen, no out=) go through
    sdpa.torch_ops, so gradients flow to q, k, v and bias.
    """
    if (out is None and cache_seqlens is None and block_table is None
            and _wants_autograd(q, k, v, bias)):
        from . import torch_ops
        return torch_ops.attention(
            q, k, v, causal=causal, align=align, window=window, softcap=softcap, scale=scale,
            alibi_slopes=alibi_slopes, bias=bias, dropout_p=dropout_p, seed=seed, offset=offset,
            return_lse=return_lse, return_probs=return_probs, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
            seqused_k=seqused_k, num_threads=num_threads, kernel=kernel)
    # the keywords passed straight on (no dicts in between: every eager call pays them)
    built = _build_fwd(
        q, k, v, causal=causal, align=align, window=window, softcap=softcap, scale=scale,
        alibi_slopes=alibi_slopes, bias=bias, dropout_p=dropout_p, seed=seed, offset=offset,
        return_lse=return_lse, return_probs=return_probs, cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
        seqused_k=seqused_k, cache_seqlens=cache_seqlens, block_table=block_table,
        cache_batch_idx=cache_batch_idx, k_new=k_new, v_new=v_new, rotary_cos=rotary_cos,
        rotary_sin=rotary_sin, rotary_interleaved=rotary_interleaved, num_splits=num_splits,
        num_threads=num_threads, kernel=kernel, out=out, cache_leftpad=cache_leftpad)
    return _run_fwd(built, return_lse, return_probs)


def _dbias_shape(bias):
    """[b|1, h|1, s_q|1, s_k]: 1 wherever bias broadcasts (size 1 or stride 0)."""
    if T.is_torch(bias):
        strides = bias.stride()
    else:
        strides = [s // bias.itemsize for s in bias.strides]
    return tuple(1 if (n == 1 or st == 0) and i < 3 else n
                 for i, (n, st) in enumerate(zip(bias.shape, strides)))


def _build_bwd(dout, q, k, v, out, lse, *, causal=False, align="bottom-right", window=(-1, -1),
               softcap=0.0, scale=None, alibi_slopes=None, bias=None, dbias=False,
               dropout_p=0.0, seed=0, offset=0, cu_seqlens_q=None, cu_seqlens_k=None,
               max_seqlen_q=0, max_seqlen_k=0, seqused_k=None, deterministic=False,
               num_threads=0, kernel=None, dq=None, dk=None, dv=None, dlse=None):
    q = T.as_array(q, "q")
    c = _Call(q, "q")
    c.keep.append(q)
    k, v = c.arr(k, "k"), c.arr(v, "v")
    out, lse, dout = c.arr(out, "out"), c.arr(lse, "lse"), c.arr(dout, "dout")
    if lse is None:
        raise _invalid("lse = None: the backward needs the forward's lse (return_lse=True)")
    d = _lib.new_desc(_lib.sdpa_bwd_desc)
    bias4 = _fill_attn(c, d.attn, q, k, v, causal=causal, align=align, window=window,
                       softcap=softcap, scale=scale, alibi_slopes=alibi_slopes, bias=bias,
                       dropout_p=dropout_p, seed=seed, offset=offset, cu_seqlens_q=cu_seqlens_q,
                       cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                       max_seqlen_k=max_seqlen_k, seqused_k=seqused_k, num_threads=num_threads,
                       kernel=kernel)
    c.set(d.out, out, "out")
    c.set(d.lse, lse, "lse")
    c.set(d.dout, dout, "dout")
    dq = T.empty(q, q.shape) if dq is None else c.arr(dq, "dq")
    dk = T.empty(k, k.shape) if dk is None else c.arr(dk, "dk")
    dv = T.empty(v, v.shape) if dv is None else c.arr(dv, "dv")
    c.set(d.dq, dq, "dq")
    c.set(d.dk, dk, "dk")
    c.set(d.dv, dv, "dv")
    want_dbias = dbias is not None and dbias is not False
    if want_dbias:
        if dbias is True:
            if bias4 is None:
                raise _invalid("dbias = True without a bias: pass the forward's bias")
            dbias = T.empty(bias4, _dbias_shape(bias4))
        else:
            dbias = _bias4(c.arr(dbias, "dbias"))
            c.keep.append(dbias)
        c.set(d.dbias, dbias, "dbias")
    if dlse is not None:
        c.set(d.dlse, c.arr(dlse, "dlse"), "dlse")
    if deterministic:
        d.deterministic = 1
    return d, c, dq, dk, dv, (dbias if want_dbias else None)


def backward(dout, q, k, v, out, lse, *, causal=False, align="bottom-right", window=(-1, -1),
             softcap=0.0, scale=None, alibi_slopes=None, bias=None, dbias=False, dropout_p=0.0,
             seed=0, offset=0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
             max_seqlen_k=0, seqused_k=None, deterministic=False, num_threads=0, kernel=None,
             dq=None, dk=None, dv=None, dlse=None):
    """Attention backward (sdpa_bwd): the modifiers exactly as given to forward().

    Returns (dq, dk, dv), or (dq, dk, dv, dbias) with dbias=True (allocated
    [b|1, h|1, s_q|1, s_k], 1 where bias broadcasts) or dbias=<array>.
    dk/dv are summed over the query heads of a GQA group. dlse: the gradient
    of lse, when lse feeds the loss (lse's shape, f32)."""
    d, c, dq, dk, dv, db = _build_bwd(
        dout, q, k, v, out, lse, causal=causal, align=align, window=window, softcap=softcap,
        scale=scale, alibi_slopes=alibi_slopes, bias=bias, dbias=dbias, dropout_p=dropout_p,
        seed=seed, offset=offset, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
        deterministic=deterministic, num_threads=num_threads, kernel=kernel, dq=dq, dk=dk, dv=dv,
        dlse=dlse)
    L = _lib.lib()
    _call(L.sdpa_bwd, d, c.dev, L.sdpa_bwd_workspace_size, True)
    return (dq, dk, dv) if db is None else (dq, dk, dv, db)


def merge_states(out_parts, lse_parts, *, out=None, lse=None, out_dtype=None):
    """Exact merge of partial results over disjoint key sets (sdpa_merge_states).

    out_parts [n, t, h, d] (f32/f16/bf16), lse_parts f32 [n, t, h] (any strides).
    Returns (out [t, h, d] in out_parts' dtype or out_dtype, lse f32 [t, h])."""
    out_parts = T.as_array(out_parts, "out_parts")
    c = _Call(out_parts, "out_parts")
    c.keep.append(out_parts)
    lse_parts = c.arr(lse_parts, "lse_parts")
    if out_parts.ndim != 4:
        raise _invalid("out_parts: rank %d; expected [n, t, h, d]" % out_parts.ndim)
    n, t, h, dd = out_parts.shape
    d = _lib.new_desc(_lib.sdpa_merge_desc)
    d.device = c.dev[0]
    d.stream = T.stream_of(c.dev)
    out = T.empty(out_parts, (t, h, dd), out_dtype) if out is None else c.arr(out, "out")
    lse = T.empty(out_parts, (t, h), "float32") if lse is None else c.arr(lse, "lse")
    c.set(d.out_parts, out_parts, "out_parts")
    c.set(d.lse_parts, lse_parts, "lse_parts")
    c.set(d.out, out, "out")
    c.set(d.lse, lse, "lse")
    _call(_lib.lib().sdpa_merge_states, d, c.dev)
    return out, lse


def explain(q, k, v, *, backward=False, **kw):
    """Which kernel the problem gets, and why not each of the others (a str).

    The keywords are forward()'s (or, with backward=True, the modifiers of
    backward(); outputs are allocated to describe the problem, nothing runs)."""
    L = _lib.lib()
    buf = ctypes.create_string_buffer(_EXPLAIN_BUF)
    if not backward:
        kw.pop("out", None)
        d, c, *_ = _build_fwd(q, k, v, **kw)
        _lib.check(L.sdpa_explain_fwd(ctypes.byref(d), buf, _EXPLAIN_BUF))
    else:
        fkw = {x: kw[x] for x in kw if x not in ("deterministic", "dbias")}
        fkw["return_lse"] = True
        fd, fc, out, lse, _ = _build_fwd(q, k, v, **fkw)
        bkw = {x: kw[x] for x in kw if x not in ("return_lse", "return_probs") and
               x not in _CACHE_KEYS}
        d, c, *_ = _build_bwd(T.empty(out, out.shape), q, k, v, out, lse, **bkw)
        _lib.check(L.sdpa_explain_bwd(ctypes.byref(d), buf, _EXPLAIN_BUF))
    return buf.value.decode("utf-8", "replace")


def _s(b):
    return b.decode("utf-8", "replace") if b else ""


def kernels():
    """The kernel registry of the loaded library, in preference order (dicts)."""
    L = _lib.lib()
    res = []
    for i in range(L.sdpa_kernel_count()):
        info = _lib.sdpa_kernel_info()
        _lib.check(L.sdpa_kernel_get(i, ctypes.byref(info)))
        res.append({
            "name": _s(info.name),
            "op": _s(info.op),
            "device": "cuda" if info.device == _lib.SDPA_DEVICE_CUDA else "cpu",
            "min_arch": info.min_arch,
            "max_arch": info.max_arch,
            "dtypes": [x for x in _s(info.dtypes).split(",") if x],
            "max_head_dim": info.max_head_dim,
            "block_m": info.block_m,
            "block_n": info.block_n,
            "features": [x for x in _s(info.features).split(",") if x],
        })
    return res


def version():
    """The loaded library's version, "major.minor.patch"."""
    n = _lib.lib().sdpa_version()
    return "%d.%d.%d" % (n // 10000, (n // 100) % 100, n % 100)


def cuda_available():
    """True if the loaded library has the CUDA backend and a CUDA device is visible."""
    return bool(_lib.lib().sdpa_cuda_available())


def status_string(status):
    return _s(_lib.lib().sdpa_status_string(int(status)))
