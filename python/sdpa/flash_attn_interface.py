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
- S_dmask is sdpa's probs (f32 [b, h, s_q, s_k], p before the 1/(1-p) scaling,
  dropped entries negated) for dense calls, also without dropout; None for varlen.
- dropout seeds are drawn from torch's default (CPU) generator per call
  (torch.manual_seed makes runs reproducible); the backward reuses them.
- flash_attn_with_kvcache: rotary is applied to q at positions cache_seqlens + i
  (sdpa's contract), also for non-causal, non-local calls (flash_attn rotates
  every query at cache_seqlens there); cache_leftpad is not supported; any
  page size that is a multiple of 16 works.
- varlen with block_table (paged varlen) is not supported: use
  flash_attn_with_kvcache.
"""
import torch

from . import torch_ops

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


def _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
         deterministic, return_attn_probs, **varlen):
    dense = "cu_seqlens_q" not in varlen
    res = torch_ops.attention(
        q, k, v, causal=causal, align="bottom-right", window=window_size, softcap=softcap,
        scale=softmax_scale, alibi_slopes=alibi_slopes, dropout_p=dropout_p,
        seed=_seed(dropout_p), offset=0, return_lse=return_attn_probs,
        return_probs=return_attn_probs and dense, deterministic=deterministic, **varlen)
    if not return_attn_probs:
        return res
    if dense:
        return res
    out, lse = res
    return out, lse, None


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
    return _run(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal,
                window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """q [b, s_q, h, d], kv [b, s_k, 2, h_k, d]."""
    return _run(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """q [total_q, h, d], k/v [total_k, h_k, d], cu_seqlens int32 [b + 1]
    -> out [total_q, h, d] (or (out, softmax_lse [h, total_q], None))."""
    if block_table is not None:
        raise NotImplementedError("sdpa: flash_attn_varlen_func with block_table (paged varlen) "
                                  "is not supported; use flash_attn_with_kvcache")
    return _run(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                deterministic, return_attn_probs, cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, h, d]."""
    return _run(qkv[:, 0], qkv[:, 1], qkv[:, 2], dropout_p, softmax_scale, causal, window_size,
                softcap, alibi_slopes, deterministic, return_attn_probs, cu_seqlens_q=cu_seqlens,
                cu_seqlens_k=cu_seqlens, max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """q [total_q, h, d], kv [total_k, 2, h_k, d]."""
    return _run(q, kv[:, 0], kv[:, 1], dropout_p, softmax_scale, causal, window_size, softcap,
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
    if cache_leftpad is not None:
        raise NotImplementedError("sdpa: cache_leftpad is not supported")
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
    out, lse = torch_ops.kvcache_attention(
        q, k_cache, v_cache, cache_seqlens.to(torch.int32), k_new=k, v_new=v,
        rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx,
        block_table=block_table, alibi_slopes=alibi_slopes, scale=softmax_scale,
        softcap=softcap, causal=causal, window=window_size,
        rotary_interleaved=rotary_interleaved, num_splits=num_splits)
    return (out, lse) if return_softmax_lse else out
