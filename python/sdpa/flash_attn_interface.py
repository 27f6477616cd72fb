"""flash_attn 2.6 functions on top of sdpa (torch tensors).

Same names, arguments, defaults and return values as flash_attn 2.6+:

    flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False)
    -> out, or (out, softmax_lse, S_dmask) with return_attn_probs

and the qkvpacked / kvpacked / varlen variants and flash_attn_with_kvcache.
causal is bottom-right aligned (flash_attn >= 2.1). Layouts: q [b, s, h, d]
(varlen [total, h, d]); GQA by giving k/v fewer heads.

Differences from flash_attn:
- S_dmask is in flash_attn's form (f32 [b, h, s_q, s_k], varlen [b, h,
  max_seqlen_q, max_seqlen_k] zero past each sequence; not rounded up):
  exp(s - m) with m the running row maximum over key blocks of
  _get_block_size_n(...) columns taken from the last block down, dropped
  entries negated; normalize_flash_attn_S-style code recovers the
  probabilities. It is derived from sdpa's probs and lse.
- dropout seeds are drawn from torch's default (CPU) generator per call
  (torch.manual_seed makes runs reproducible); the backward reuses them.
- flash_attn_with_kvcache: rotary_cos / rotary_sin may be f32 or q's dtype
  (converted to f32, exactly); any page size that is a multiple of 16 works.
- varlen with block_table (paged varlen) runs the forward only, as in
  flash_attn (no gradient flows through it).
"""
import torch

from . import _core, torch_ops

__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
]


def _seed(dropout_p):
    if not dropout_p:
        return 0
    # torch's default CPU generator: no device sync, follows torch.manual_seed
    return int(torch.randint(0, 1 << 62, (1,), dtype=torch.int64).item())


def _unpack(x, name, dim, n, layout):
    """The n tensors packed in dimension dim of x (views), after checking the
    layout: a tensor packed otherwise raises instead of being read as heads."""
    if x.dim() != len(layout.split(",")) or x.shape[dim] != n:
        raise ValueError("%s: shape %s: expected [%s] with %d in dimension %d"
                         % (name, list(x.shape), layout, n, dim))
    return [x.select(dim, i) for i in range(n)]


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """The key-tile width of flash_attn 2.6's forward for this problem: the block
    over which S_dmask's running maximum is taken."""
    dev = torch.device(device)
    major, minor = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else (8, 0)
    sm8x = major == 8 and minor > 0
    if head_dim <= 32:
        return 128
    if head_dim <= 64:
        return 64 if is_dropout else 128
    if head_dim <= 96:
        return 64
    if head_dim <= 128:
        if sm8x:
            return 64 if (not is_dropout and is_causal) else 32
        return 32 if is_dropout else 64
    if head_dim <= 160:
        return 64 if sm8x else 32
    return 64


def _lse_padded(lse, cu_seqlens_q, rows):
    """Varlen lse [h, total_q] as [b, h, rows] (rows past a sequence: +inf)."""
    cu = cu_seqlens_q.tolist()
    out = lse.new_full((len(cu) - 1, lse.shape[0], rows), float("inf"))
    for b in range(len(cu) - 1):
        out[b, :, :cu[b + 1] - cu[b]] = lse[:, cu[b]:cu[b + 1]]
    return out


def _s_dmask(probs, lse, head_dim, is_dropout, is_causal, cu_seqlens_q=None):
    """flash_attn's S_dmask from sdpa's probs (p_ij, dropped entries negated) and
    lse: p_ij * exp(lse_i - m_ij), m_ij the maximum of row i's scores over the
    key blocks from j's block to the last (flash_attn walks the blocks backwards).
    Varlen probs are [b, h, max_seqlen_q, max_seqlen_k] (zero past each sequence)."""
    n = _get_block_size_n(probs.device, head_dim, is_dropout, is_causal)
    mag = probs.abs()
    if cu_seqlens_q is not None:
        lse = _lse_padded(lse, cu_seqlens_q, probs.shape[2])
    lse4 = lse.float()[..., None]
    scores = torch.where(mag > 0, torch.log(mag) + lse4, torch.full_like(mag, -float("inf")))
    sk = probs.shape[-1]
    nb = (sk + n - 1) // n
    pad = nb * n - sk
    if pad:
        scores = torch.nn.functional.pad(scores, (0, pad), value=-float("inf"))
    block_max = scores.view(*scores.shape[:-1], nb, n).amax(-1)
    run_max = torch.cummax(block_max.flip(-1), dim=-1).values.flip(-1)
    m = run_max.repeat_interleave(n, dim=-1)[..., :sk]
    # exp(s - m) <= 1 from the scores (p * exp(lse - m) overflows where p is denormal)
    return torch.where(mag > 0, torch.copysign(torch.exp(scores[..., :sk] - m), probs), probs)


def _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
         deterministic, return_attn_probs, block_table=None, **varlen):
    dense = "cu_seqlens_q" not in varlen
    args = dict(causal=causal, align="bottom-right", window=window_size, softcap=softcap,
                scale=softmax_scale, alibi_slopes=alibi_slopes, dropout_p=dropout_p,
                seed=_seed(dropout_p), offset=0, return_lse=return_attn_probs,
                return_probs=return_attn_probs, **varlen)
    if block_table is None:
        res = torch_ops.attention(q, k, v, deterministic=deterministic, **args)
    else:  # paged keys: the forward alone (flash_attn has no backward for them)
        res = _core.forward(q, k, v, block_table=block_table, **args)
    if not return_attn_probs:
        return res
    out, lse, probs = res
    with torch.no_grad():
        probs = _s_dmask(probs, lse, q.shape[-1], dropout_p > 0, causal,
                         None if dense else varlen["cu_seqlens_q"])
    return out, lse, probs


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """q [b, s_q, h, d], k/v [b, s_k, h_k, d] -> out [b, s_q, h, d]
    (or (out, softmax_lse [b, h, s_q], S_dmask) with return_attn_probs)."""
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """qkv [b, s, 3, h, d]: views, no copies; the gradient flows into qkv."""
    q, k, v = _unpack(qkv, "qkv", 2, 3, "b, s, 3, h, d")
    return _run(q, k, v, dropout_p, softmax_scale, causal,
                window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """q [b, s_q, h, d], kv [b, s_k, 2, h_k, d]."""
    k, v = _unpack(kv, "kv", 2, 2, "b, s_k, 2, h_k, d")
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """q [total_q, h, d], k/v [total_k, h_k, d] (with block_table: paged
    [num_blocks, page_size, h_k, d]), cu_seqlens int32 [b + 1]
    -> out [total_q, h, d] (or (out, softmax_lse [h, total_q], S_dmask))."""
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs, block_table, cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, h, d]."""
    q, k, v = _unpack(qkv, "qkv", 1, 3, "total, 3, h, d")
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_attn_probs, cu_seqlens_q=cu_seqlens,
                cu_seqlens_k=cu_seqlens, max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """q [total_q, h, d], kv [total_k, 2, h_k, d]."""
    k, v = _unpack(kv, "kv", 1, 2, "total_k, 2, h_k, d")
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                alibi_slopes, deterministic, return_attn_probs, cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """Decoding with a KV cache (no backward). k_cache/v_cache [b_cache, s_cache,
    h_k, d] or, with block_table, paged [num_blocks, page_size, h_k, d]; k/v
    (new tokens) are written into the cache in place at cache_seqlens.
    Returns out [b, s_q, h, d] (or (out, softmax_lse [b, h, s_q]))."""
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("k_cache and v_cache must have a contiguous last dimension")
    if cache_seqlens is None:
        if block_table is not None:
            raise ValueError("cache_seqlens is required with block_table")
        cache_seqlens = k_cache.shape[1]  # the whole cache is valid
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32,
                                   device=q.device)
    q, k, v = (torch_ops._last_dim_contiguous(x) for x in (q, k, v))
    # the library's tables are f32; q's fp16 / bf16 convert exactly
    if rotary_cos is not None and rotary_cos.dtype != torch.float32:
        rotary_cos = rotary_cos.float()
    if rotary_sin is not None and rotary_sin.dtype != torch.float32:
        rotary_sin = rotary_sin.float()
    out, lse = torch_ops.kvcache_attention(
        q, k_cache, v_cache, cache_seqlens.to(torch.int32), k_new=k, v_new=v,
        cache_leftpad=cache_leftpad,
        rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx,
        block_table=block_table, alibi_slopes=alibi_slopes, scale=softmax_scale,
        softcap=softcap, causal=causal, window=window_size,
        rotary_interleaved=rotary_interleaved, num_splits=num_splits)
    return (out, lse) if return_softmax_lse else out
