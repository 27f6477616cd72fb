"""torch integration: autograd, torch.compile and CUDA graphs.

    torch.ops.sdpa.fwd(...) -> (out, lse, probs)       a torch.library custom op
    torch.ops.sdpa.bwd(...) -> (dq, dk, dv, dbias)     (torch >= 2.4)

Both have fake (meta) implementations, so torch.compile traces them without
running them, and fwd has an autograd formula (register_autograd) that calls
bwd: gradients flow to q, k, v and bias. Each call passes torch's current CUDA
stream, so the ops are captured by torch.cuda.graphs like any other kernel
(dropout then replays the seed it was captured with).

On torch < 2.4 (no torch.library.custom_op) the same math runs through the
torch.autograd.Function SdpaAttention (eager only).

Plain eager calls skip the custom op's dispatch (tens of us a call, ~170 us with
its autograd formula; issue 4 counts host time): where nothing traces, transforms
or watches ops (_plain_eager), attention() runs SdpaAttention (or, with no
gradient to track, the implementation itself) and kvcache_attention() the
implementation plus the op's version-counter bump of the caches. The results are
the op's; torch.compile, torch.export / make_fx, torch.jit tracing, torch.func
transforms, dispatch and function modes and tensor subclasses still see the op.

lse is differentiable (as xformers' forward_requires_grad lse, which merges of
partial results need): its gradient goes to the library's backward as dlse
(CPU and SIMT rows). An unused lse costs nothing (its gradient stays None).
"""
from typing import Optional, Tuple

import torch

from . import _core
from ._lib import SdpaError

Tensor = torch.Tensor

HAVE_CUSTOM_OP = hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake")

_U64 = 1 << 64


def _signed(seed):
    seed = int(seed) & (_U64 - 1)
    return seed - _U64 if seed >= (1 << 63) else seed


def _unsigned(seed):
    return int(seed) & (_U64 - 1)


def _empty0(like):
    return like.new_empty((0,), dtype=torch.float32)


def _tracing_or_modes():
    """Something that needs to see (or trace, or transform) the custom op itself:
    torch.compile, torch.jit tracing, a torch dispatch mode (make_fx / export,
    FakeTensorMode, FlopCounterMode, activation checkpointing policies, ...), a
    torch function mode, a torch.func transform, the profiler (its traces name the
    op). An API this torch lacks counts as yes (the op path, as before)."""
    C = torch._C
    try:
        return bool(torch.compiler.is_compiling() or torch.jit.is_tracing()
                    or C._len_torch_dispatch_stack() or C._is_torch_function_mode_enabled()
                    or C._functorch.peek_interpreter_stack() is not None
                    or C._autograd._profiler_enabled())
    except AttributeError:  # pragma: no cover - older torch
        return True


def _plain_eager(tensors):
    """True where calling the implementation directly is exactly what the custom
    op would do, less its dispatch: nothing of _tracing_or_modes() and every
    tensor a plain torch.Tensor (a subclass, e.g. FakeTensor or DTensor, goes
    through the op)."""
    if _tracing_or_modes():
        return False
    for x in tensors:
        if x is not None and type(x) is not Tensor:
            return False
    return True


# ---- the implementations (eager) --------------------------------------------------------

def _fwd_impl(q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k,
              max_seqlen_q, max_seqlen_k, scale, softcap, causal, align, window_left,
              window_right, dropout_p, seed, offset, return_probs, num_threads, kernel):
    res = _core._forward_raw(
        q, k, v, causal=causal, align=align, window=(window_left, window_right), softcap=softcap,
        scale=scale, alibi_slopes=alibi_slopes, bias=bias, dropout_p=dropout_p,
        seed=_unsigned(seed), offset=offset, return_lse=True, return_probs=return_probs,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k, seqused_k=seqused_k, num_threads=num_threads,
        kernel=kernel or None)
    out, lse = res[0], res[1]
    probs = res[2] if return_probs else _empty0(q)
    return out, lse, probs


def _bwd_impl(dout, q, k, v, out, lse, dlse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
              seqused_k, max_seqlen_q, max_seqlen_k, scale, softcap, causal, align, window_left,
              window_right, dropout_p, seed, offset, deterministic, need_dbias, num_threads,
              kernel):
    dlse = _last_dim_contiguous(dlse)
    dbias = None
    if need_dbias:
        if bias is None:
            raise SdpaError(1, "dbias requested without a bias")
        dbias = torch.empty(bias.shape, dtype=bias.dtype, device=bias.device)
    res = _core.backward(
        dout, q, k, v, out, lse, causal=causal, align=align, window=(window_left, window_right),
        softcap=softcap, scale=scale, alibi_slopes=alibi_slopes, bias=bias,
        dbias=dbias if need_dbias else False, dropout_p=dropout_p, seed=_unsigned(seed),
        offset=offset, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
        deterministic=deterministic, num_threads=num_threads, kernel=kernel or None, dlse=dlse)
    dq, dk, dv = res[0], res[1], res[2]
    return dq, dk, dv, (dbias if need_dbias else _empty0(q))


def _kvcache_impl(q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin, cache_seqlens,
                  cache_batch_idx, block_table, alibi_slopes, cache_leftpad, scale, softcap,
                  causal, window_left, window_right, rotary_interleaved, num_splits):
    out, lse = _core._forward_raw(
        q, k_cache, v_cache, causal=causal, align="bottom-right",
        window=(window_left, window_right), softcap=softcap, scale=scale,
        alibi_slopes=alibi_slopes, return_lse=True, cache_seqlens=cache_seqlens,
        block_table=block_table, cache_batch_idx=cache_batch_idx, k_new=k_new, v_new=v_new,
        rotary_cos=rotary_cos, rotary_sin=rotary_sin, rotary_interleaved=rotary_interleaved,
        num_splits=num_splits, cache_leftpad=cache_leftpad)
    return out, lse


def kvcache_attention(q, k_cache, v_cache, cache_seqlens, *, k_new=None, v_new=None,
                      rotary_cos=None, rotary_sin=None, cache_batch_idx=None, block_table=None,
                      alibi_slopes=None, scale=None, softcap=0.0, causal=False,
                      window=(-1, -1), rotary_interleaved=False, num_splits=0,
                      cache_leftpad=None, use_custom_op=None):
    """KV-cache forward (no autograd) through the custom op sdpa::fwd_kvcache where
    available (traceable by torch.compile, which sees the in-place cache update).
    cache_seqlens: int32 tensor [b]. Returns (out, lse)."""
    wl, wr = _core._window(window)
    args = (q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin, cache_seqlens,
            cache_batch_idx, block_table, alibi_slopes, cache_leftpad,
            0.0 if scale is None else float(scale), float(softcap or 0.0), bool(causal), wl, wr,
            bool(rotary_interleaved), int(num_splits or 0))
    if use_custom_op is None:
        use_custom_op = HAVE_CUSTOM_OP
        tensors = args[:12]
        if use_custom_op and not _core._needs_grad(tensors) and _plain_eager(tensors):
            # what the op does here, without its dispatch: the implementation, then
            # the caches' version counters bumped (its ADInplaceOrView kernel's
            # job; inference tensors have none and are left alone). No no_grad:
            # no input needs grad here, so nothing is recorded anyway.
            res = _kvcache_impl(*args)
            torch.autograd.graph.increment_version(k_cache)
            torch.autograd.graph.increment_version(v_cache)
            return res
    if use_custom_op:
        return torch.ops.sdpa.fwd_kvcache(*args)
    with torch.no_grad():
        return _kvcache_impl(*args)


def _fwd_shapes(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_probs):
    out, lse = _core._out_shapes(q, v, cu_seqlens_q is not None)
    probs = (_core._probs_shape(q, k, cu_seqlens_q, max_seqlen_q, max_seqlen_k) if return_probs
             else (0,))
    return out, lse, probs


# ---- torch.library custom ops --------------------------------------------------------------

if HAVE_CUSTOM_OP:

    @torch.library.custom_op("sdpa::fwd", mutates_args=())
    def sdpa_fwd(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                 alibi_slopes: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
                 cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor],
                 max_seqlen_q: int, max_seqlen_k: int, scale: float, softcap: float,
                 causal: bool, align: int, window_left: int, window_right: int,
                 dropout_p: float, seed: int, offset: int, return_probs: bool,
                 num_threads: int, kernel: str,
                 deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        # deterministic is for the backward (the autograd formula reads it)
        return _fwd_impl(q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k,
                         max_seqlen_q, max_seqlen_k, scale, softcap, causal, align, window_left,
                         window_right, dropout_p, seed, offset, return_probs, num_threads, kernel)

    @torch.library.register_fake("sdpa::fwd")
    def _sdpa_fwd_fake(q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k,
                       max_seqlen_q, max_seqlen_k, scale, softcap, causal, align, window_left,
                       window_right, dropout_p, seed, offset, return_probs, num_threads, kernel,
                       deterministic):
        so, sl, sp = _fwd_shapes(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, return_probs)
        return (q.new_empty(so), q.new_empty(sl, dtype=torch.float32),
                q.new_empty(sp, dtype=torch.float32))

    @torch.library.custom_op("sdpa::bwd", mutates_args=())
    def sdpa_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                 dlse: Optional[Tensor], bias: Optional[Tensor], alibi_slopes: Optional[Tensor],
                 cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
                 seqused_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
                 scale: float, softcap: float, causal: bool, align: int, window_left: int,
                 window_right: int, dropout_p: float, seed: int, offset: int,
                 deterministic: bool, need_dbias: bool, num_threads: int,
                 kernel: str) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        return _bwd_impl(dout, q, k, v, out, lse, dlse, bias, alibi_slopes, cu_seqlens_q,
                         cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, scale, softcap,
                         causal, align, window_left, window_right, dropout_p, seed, offset,
                         deterministic, need_dbias, num_threads, kernel)

    @torch.library.register_fake("sdpa::bwd")
    def _sdpa_bwd_fake(dout, q, k, v, out, lse, dlse, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                       seqused_k, max_seqlen_q, max_seqlen_k, scale, softcap, causal, align,
                       window_left, window_right, dropout_p, seed, offset, deterministic,
                       need_dbias, num_threads, kernel):
        dbias = (bias.new_empty(bias.shape) if need_dbias and bias is not None
                 else q.new_empty((0,), dtype=torch.float32))
        return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dbias)

    # inputs of sdpa::fwd, in order (the autograd formula's bookkeeping)
    _FWD_ARGS = ("q", "k", "v", "bias", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k",
                 "seqused_k", "max_seqlen_q", "max_seqlen_k", "scale", "softcap", "causal",
                 "align", "window_left", "window_right", "dropout_p", "seed", "offset",
                 "return_probs", "num_threads", "kernel", "deterministic")

    def _setup_context(ctx, inputs, output):
        a = dict(zip(_FWD_ARGS, inputs))
        out, lse, _ = output
        ctx.save_for_backward(a["q"], a["k"], a["v"], out, lse, a["bias"], a["alibi_slopes"],
                              a["cu_seqlens_q"], a["cu_seqlens_k"], a["seqused_k"])
        ctx.scalars = tuple(a[n] for n in _FWD_ARGS[8:19])  # max_seqlen_q .. offset
        ctx.num_threads = a["num_threads"]
        ctx.kernel = a["kernel"]
        ctx.deterministic = a["deterministic"]
        ctx.mark_non_differentiable(output[2])
        ctx.set_materialize_grads(False)  # an unused lse's gradient stays None

    def _autograd_bwd(ctx, dout, dlse, dprobs):
        q, k, v, out, lse, bias, alibi, cu_q, cu_k, seqused = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        if dout.stride(-1) != 1:
            dout = dout.contiguous()
        need_dbias = bias is not None and ctx.needs_input_grad[3]
        dq, dk, dv, dbias = torch.ops.sdpa.bwd(
            dout, q, k, v, out, lse, dlse, bias, alibi, cu_q, cu_k, seqused, *ctx.scalars,
            ctx.deterministic, need_dbias, ctx.num_threads, ctx.kernel)
        return (dq, dk, dv, dbias if need_dbias else None) + (None,) * (len(_FWD_ARGS) - 4)

    torch.library.register_autograd("sdpa::fwd", _autograd_bwd, setup_context=_setup_context)

    @torch.library.custom_op("sdpa::fwd_kvcache", mutates_args=("k_cache", "v_cache"))
    def sdpa_fwd_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k_new: Optional[Tensor],
                         v_new: Optional[Tensor], rotary_cos: Optional[Tensor],
                         rotary_sin: Optional[Tensor], cache_seqlens: Tensor,
                         cache_batch_idx: Optional[Tensor], block_table: Optional[Tensor],
                         alibi_slopes: Optional[Tensor], cache_leftpad: Optional[Tensor],
                         scale: float, softcap: float, causal: bool, window_left: int,
                         window_right: int, rotary_interleaved: bool,
                         num_splits: int) -> Tuple[Tensor, Tensor]:
        """Decoding forward with a KV cache; k_new/v_new are appended to the cache in place."""
        return _kvcache_impl(q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin,
                             cache_seqlens, cache_batch_idx, block_table, alibi_slopes,
                             cache_leftpad, scale, softcap, causal, window_left, window_right,
                             rotary_interleaved, num_splits)

    @torch.library.register_fake("sdpa::fwd_kvcache")
    def _sdpa_fwd_kvcache_fake(q, k_cache, v_cache, k_new, v_new, rotary_cos, rotary_sin,
                               cache_seqlens, cache_batch_idx, block_table, alibi_slopes,
                               cache_leftpad, scale, softcap, causal, window_left, window_right,
                               rotary_interleaved, num_splits):
        so, sl = _core._out_shapes(q, v_cache, False)
        return q.new_empty(so), q.new_empty(sl, dtype=torch.float32)


# ---- torch.autograd.Function (eager; also the path on torch < 2.4) -----------------------

class SdpaAttention(torch.autograd.Function):
    """out, lse, probs = SdpaAttention.apply(q, k, v, bias, alibi_slopes, cu_seqlens_q,
    cu_seqlens_k, seqused_k, params) with params the tuple (max_seqlen_q,
    max_seqlen_k, scale, softcap, causal, align, window_left, window_right,
    dropout_p, seed, offset, return_probs, num_threads, kernel, deterministic)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, params):
        fwd_params = params[:14]
        out, lse, probs = _fwd_impl(q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                                    seqused_k, *fwd_params)
        ctx.save_for_backward(q, k, v, out, lse, bias, alibi_slopes, cu_seqlens_q,
                              cu_seqlens_k, seqused_k)
        ctx.params = params
        ctx.mark_non_differentiable(probs)
        ctx.set_materialize_grads(False)  # an unused lse's gradient stays None
        return out, lse, probs

    @staticmethod
    def backward(ctx, dout, dlse, dprobs):
        q, k, v, out, lse, bias, alibi, cu_q, cu_k, seqused = ctx.saved_tensors
        p = ctx.params
        if dout is None:
            dout = torch.zeros_like(out)
        if dout.stride(-1) != 1:
            dout = dout.contiguous()
        need_dbias = bias is not None and ctx.needs_input_grad[3]
        dq, dk, dv, dbias = _bwd_impl(dout, q, k, v, out, lse, dlse, bias,
                                      alibi, cu_q, cu_k, seqused, *p[:11], p[14], need_dbias,
                                      p[12], p[13])
        return dq, dk, dv, (dbias if need_dbias else None), None, None, None, None, None


# ---- the entry point -----------------------------------------------------------------------

def _last_dim_contiguous(x):
    if x is not None and x.dim() > 0 and x.shape[-1] > 1 and x.stride(-1) != 1:
        return x.contiguous()
    return x


def _prepare_bias(bias):
    """bias as a 4-D view whose broadcast dimensions have size 1: a stride-0
    (expanded) dimension of a computed tensor becomes a narrow(dim, 0, 1) of it,
    so that the library's dbias (summed over size-1 dimensions) is exactly the
    gradient of that view and autograd sums it back through the expand. A leaf
    that requires grad keeps its stride-0 dimensions: its .grad is per element
    (torch's rule), so the library writes the full-shaped dbias."""
    if bias is None:
        return None
    bias = _core._bias4(bias)
    if not (bias.requires_grad and bias.grad_fn is None):
        for i in range(3):
            if bias.shape[i] > 1 and bias.stride(i) == 0:
                bias = bias.narrow(i, 0, 1)
    return _last_dim_contiguous(bias)


def attention(q, k, v, *, causal=False, align="bottom-right", window=(-1, -1), softcap=0.0,
              scale=None, alibi_slopes=None, bias=None, dropout_p=0.0, seed=0, offset=0,
              return_lse=False, return_probs=False, cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q=0, max_seqlen_k=0, seqused_k=None, num_threads=0, kernel=None,
              deterministic=False, use_custom_op=None):
    """Differentiable sdpa forward for torch tensors (dense or varlen layouts).

    Same keywords as sdpa.forward (plus deterministic, used by the backward).
    Returns out, or (out, lse[, probs])."""
    q, k, v = (_last_dim_contiguous(x) for x in (q, k, v))
    bias = _prepare_bias(bias)
    wl, wr = _core._window(window)
    if cu_seqlens_q is not None:
        cu_seqlens_q = cu_seqlens_q.to(torch.int32)
    if cu_seqlens_k is not None:
        cu_seqlens_k = cu_seqlens_k.to(torch.int32)
    if seqused_k is not None:
        seqused_k = seqused_k.to(torch.int32)
    scalars = (int(max_seqlen_q or 0), int(max_seqlen_k or 0),
               0.0 if scale is None else float(scale), float(softcap or 0.0), bool(causal),
               _core._align_code(align), wl, wr, float(dropout_p or 0.0), _signed(seed),
               int(offset), bool(return_probs), int(num_threads or 0), kernel or "")
    tensors = (q, k, v, bias, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k)
    if use_custom_op is None:
        use_custom_op = HAVE_CUSTOM_OP and not _plain_eager(tensors)
    if use_custom_op:
        out, lse, probs = torch.ops.sdpa.fwd(*tensors, *scalars, bool(deterministic))
    elif _core._needs_grad(tensors):
        out, lse, probs = SdpaAttention.apply(*tensors, scalars + (bool(deterministic),))
    else:  # nothing to differentiate: SdpaAttention's forward without the Function
        out, lse, probs = _fwd_impl(*tensors, *scalars)
    if not (return_lse or return_probs):
        return out
    return (out, lse, probs) if return_probs else (out, lse)
