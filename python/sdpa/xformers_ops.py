"""xformers.ops' attention functions (0.0.28) on top of sdpa (torch tensors).

    memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None)
    memory_efficient_attention_forward(...)                  no autograd
    memory_efficient_attention_forward_requires_grad(...)    -> (out, lse)
    memory_efficient_attention_backward(grad, out, lse, query, key, value, ...)
                                                             -> (dq, dk, dv)
    memory_efficient_attention_partial(...)                  -> (out, lse), to merge
    merge_attentions(attn_split, lse_split, write_lse=True)  -> (out, lse | None)
                                                             (differentiable, lse too)

Layouts: [B, M, H, K] (key / value [B, N, H_k, K(v)], H_k dividing H: GQA);
[B, M, K] (one head); [B, M, G, H, K] (groups: key / value [B, N, G, H, K],
either expanded over H (stride 0: G kv heads) or with real per-head rows;
G and H must fold into one dimension, else ValueError, as in xformers).
lse is [B, H, M] ([B, G, H, M] for 5-D inputs; [1, H, total] for the
block-diagonal biases). The attention biases are in sdpa.xformers_bias; a
tensor bias broadcasts to [B, H, M, N] ([B, M, N] for 3-D inputs, [B, G, H, M,
N] for 5-D), and gradients flow into it. `op` is accepted and ignored: sdpa's
registry picks the kernel.
"""
import torch

from . import _core
from . import torch_ops
from .xformers_bias import *  # noqa: F401,F403
from .xformers_bias import AttentionBias, __all__ as _BIAS_NAMES

__all__ = list(_BIAS_NAMES) + [
    "memory_efficient_attention", "memory_efficient_attention_forward",
    "memory_efficient_attention_forward_requires_grad", "memory_efficient_attention_backward",
    "memory_efficient_attention_partial", "merge_attentions",
]


def _seed(p):
    if not p:
        return 0
    return int(torch.randint(0, 1 << 62, (1,), dtype=torch.int64).item())


# ---- layouts -------------------------------------------------------------------------------

def _check_bmghk_strides(x, name):
    """G and H fold into one head dimension only where H's rows follow each
    other inside a group (xformers' rule); otherwise xformers raises."""
    g, h = x.shape[2], x.shape[3]
    if g == 1 or h == 1 or x.stride(3) == 0:
        return
    if x.stride(2) != x.stride(3) * h:
        raise ValueError("%s: strides %s with shape %s: the G and H dimensions of a "
                         "[B, M, G, H, K] input must be contiguous (stride(2) == stride(3) * H)"
                         % (name, tuple(x.stride()), list(x.shape)))


def _fold_bmghk(query, key, value, share=True):
    """[B, M, G, H, K] inputs as [B, M, heads, K]. k / v expanded over H (stride 0)
    are G kv heads shared by the H query heads of their group (GQA; share=False
    keeps G * H heads, for per-element gradients); k / v with real per-head rows
    are G * H heads. Anything else raises."""
    if key.ndim != 5 or value.ndim != 5:
        raise ValueError("query is [B, M, G, H, K] (rank 5) but key has rank %d and value rank "
                         "%d: expected rank 5 for all three" % (key.ndim, value.ndim))
    B, M, G, H, K = query.shape
    for x in (key, value):
        if tuple(x.shape[:4]) != (B, key.shape[1], G, H):
            raise ValueError("Incompatible shapes for attention inputs: query %s, key %s, "
                             "value %s: expected key / value [B, N, G, H, K] with B, G, H of "
                             "query" % (list(query.shape), list(key.shape), list(value.shape)))
    for x, name in ((query, "query"), (key, "key"), (value, "value")):
        _check_bmghk_strides(x, name)
    if share and H > 1 and key.stride(3) == 0 and value.stride(3) == 0:
        key, value = key[:, :, :, 0], value[:, :, :, 0]
    else:
        key = key.reshape(B, key.shape[1], G * H, key.shape[-1])
        value = value.reshape(B, value.shape[1], G * H, value.shape[-1])
    return query.reshape(B, M, G * H, K), key, value


def _bias_to_bhmn(bias, ndim):
    """A tensor bias in the layout of ndim-D inputs as [B|1, H|1, M, N]."""
    if bias is None:
        return None
    if ndim == 3 and bias.ndim == 3:  # [B, M, N] of one-head inputs
        return bias[:, None]
    if ndim == 5 and bias.ndim == 5:  # [B, G, H, M, N]
        return bias.flatten(1, 2)
    return bias


def _to_bmhk(query, key, value, share=True):
    """query / key / value as [B, M, heads, K] views (or folded copies)."""
    if query.ndim == 3:
        return query[:, :, None], key[:, :, None], value[:, :, None]
    if query.ndim == 5:
        return _fold_bmghk(query, key, value, share)
    if query.ndim != 4:
        raise ValueError("query: rank %d; expected [B, M, H, K] (or [B, M, K], [B, M, G, H, K])"
                         % query.ndim)
    return query, key, value


def _one_to_bmhk(x):
    """One tensor of query's layout (grad, output) as [B, M, heads, K]."""
    if x.ndim == 3:
        return x[:, :, None]
    return x.flatten(2, 3) if x.ndim == 5 else x


def _from_bmhk(x, like):
    """x [B, M, heads, K] back in the layout of `like` (3-, 4- or 5-D)."""
    if like.ndim == 3:
        return x[:, :, 0]
    if like.ndim == 5:
        return x.reshape(*like.shape[:4], x.shape[-1])
    return x


def _lse_to_xformers(lse, query, varlen):
    """sdpa's lse ([B, heads, M]; varlen [heads, total]) in xformers' layout."""
    if varlen:  # [heads, total] -> [1, heads, total] ([1, G, H, total] for 5-D)
        return lse.reshape(1, *query.shape[2:4], lse.shape[-1]) if query.ndim == 5 else lse[None]
    if query.ndim == 5:
        B, M, G, H, _ = query.shape
        return lse.reshape(B, G, H, lse.shape[-1])
    if query.ndim == 3:
        return lse[:, 0]
    return lse


def _lse_from_xformers(lse, query, varlen):
    if varlen:
        return lse.reshape(-1, lse.shape[-1])
    if query.ndim == 5:
        return lse.flatten(1, 2)
    if query.ndim == 3:
        return lse[:, None]
    return lse


def _sdpa_call(query, key, value, attn_bias, p, scale, share=True, gather=None):
    """(q, k, v, keywords, varlen, rows) of one sdpa call for xformers'
    arguments; rows: the flat key rows gathered for a paged / gappy bias
    (_paged_keys; gather None: when gradients are to flow), else None."""
    ndim = query.ndim
    q, k, v = _to_bmhk(query, key, value, share)
    kw = dict(scale=scale, dropout_p=p, seed=_seed(p))
    varlen, rows = False, None
    if attn_bias is None:
        pass
    elif isinstance(attn_bias, torch.Tensor):
        kw["bias"] = _bias_to_bhmn(attn_bias, ndim)
    elif isinstance(attn_bias, AttentionBias):
        kw.update(attn_bias._sdpa_args(q.device))
        kw["bias"] = _bias_to_bhmn(kw["bias"], ndim)
        if "cu_seqlens_q" in kw:  # the block-diagonal biases: sdpa's varlen layout
            if q.shape[0] != 1:
                raise ValueError("%s: expected inputs of batch 1 (sequences concatenated along "
                                 "M), got batch %d" % (type(attn_bias).__name__, q.shape[0]))
            q, k, v = q[0], k[0], v[0]
            if "block_table" in kw:
                k, v, rows = _paged_keys(attn_bias, q, k, v, kw, gather)
            varlen = True
    else:
        raise NotImplementedError("sdpa: attn_bias of type %s" % type(attn_bias).__name__)
    return q, k, v, kw, varlen, rows


def _paged_keys(bias, q, k, v, kw, gather):
    """(k, v, rows): keys [rows, ...] of a paged / gappy bias as sdpa reads
    them, pages of the bias' page size through its table (rows None); when
    gathering (by default with gradients to compute) the used rows gathered
    into plain varlen keys (kw loses block_table), since sdpa's paged keys
    are forward only."""
    if gather is None:
        gather = _core._needs_grad((q, k, v))
    if gather:
        rows = bias._key_rows(k.device)
        del kw["block_table"]
        return k.index_select(0, rows), v.index_select(0, rows), rows
    ps = bias._page_size
    return k.reshape(-1, ps, *k.shape[1:]), v.reshape(-1, ps, *v.shape[1:]), None


def _attention(q, k, v, return_lse, kw):
    """The sdpa call: differentiable; paged keys go to _core.forward, which
    runs them forward only."""
    if "block_table" in kw:
        return _core.forward(q, k, v, return_lse=return_lse, **kw)
    return torch_ops.attention(q, k, v, return_lse=return_lse, **kw)


def _check_output_dtype(query, output_dtype):
    if output_dtype is not None and output_dtype != query.dtype:
        raise NotImplementedError("sdpa: output_dtype = %s with %s inputs: the output has the "
                                  "inputs' dtype" % (output_dtype, query.dtype))


# ---- the functions -------------------------------------------------------------------------

def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *,
                               op=None, output_dtype=None):
    """Attention of query [B, M, H, K] over key / value [B, N, H_k, K(v)] -> [B, M, H, Kv]
    (differentiable; see the module docstring for the other layouts)."""
    _check_output_dtype(query, output_dtype)
    q, k, v, kw, varlen, _ = _sdpa_call(query, key, value, attn_bias, p, scale)
    out = _attention(q, k, v, False, kw)
    return _from_bmhk(out[None] if varlen else out, query)


def memory_efficient_attention_forward(query, key, value, attn_bias=None, p=0.0, scale=None, *,
                                       op=None, output_dtype=None):
    """The forward alone (no autograd graph is recorded)."""
    with torch.no_grad():
        return memory_efficient_attention(query, key, value, attn_bias, p, scale, op=op,
                                          output_dtype=output_dtype)


def memory_efficient_attention_forward_requires_grad(query, key, value, attn_bias=None, p=0.0,
                                                     scale=None, *, op=None, output_dtype=None):
    """(out, lse), with lse in xformers' layout, for memory_efficient_attention_backward."""
    _check_output_dtype(query, output_dtype)
    q, k, v, kw, varlen, _ = _sdpa_call(query, key, value, attn_bias, p, scale)
    out, lse = _attention(q, k, v, True, kw)
    return _from_bmhk(out[None] if varlen else out, query), _lse_to_xformers(lse, query, varlen)


def memory_efficient_attention_partial(query, key, value, attn_bias=None, p=0.0, scale=None, *,
                                       op=None, output_dtype=None):
    """(out, lse) of one part of the keys, for merge_attentions."""
    return memory_efficient_attention_forward_requires_grad(
        query, key, value, attn_bias, p, scale, op=op, output_dtype=output_dtype)


def memory_efficient_attention_backward(grad, output, lse, query, key, value, attn_bias=None,
                                        p=0.0, scale=None, *, op=None):
    """(dq, dk, dv) from the forward's output and lse (no recomputation of the
    forward). Dropout needs the forward's random state: use
    memory_efficient_attention with autograd for p > 0, as in xformers."""
    if p:
        raise NotImplementedError("memory_efficient_attention_backward: dropout (p = %g) needs "
                                  "the forward's random state; call memory_efficient_attention "
                                  "and backpropagate through it instead" % p)
    # keys through a table (paged / gappy biases): the used rows gathered
    q, k, v, kw, varlen, rows = _sdpa_call(query, key, value, attn_bias, 0.0, scale, share=False,
                                           gather=True)
    kw.pop("dropout_p"), kw.pop("seed")
    g, o = _one_to_bmhk(grad), _one_to_bmhk(output)
    if varlen:
        g, o = g[0], o[0]
    l = _lse_from_xformers(lse, query, varlen)[..., :q.shape[-3]]  # lse may be padded past M
    g, o, l = (torch_ops._last_dim_contiguous(x) for x in (g, o, l))
    dq, dk, dv = _core.backward(g, q, k, v, o, l, **kw)[:3]
    if rows is not None:  # back to every row (rows read twice sum, rows not read get 0)
        n = key.shape[1]
        dk = dk.new_zeros((n,) + tuple(dk.shape[1:])).index_add_(0, rows, dk)
        dv = dv.new_zeros((n,) + tuple(dv.shape[1:])).index_add_(0, rows, dv)
    if varlen:
        dq, dk, dv = dq[None], dk[None], dv[None]
    return _from_bmhk(dq, query), _from_bmhk(dk, key), _from_bmhk(dv, value)


class _MergeStates(torch.autograd.Function):
    """sdpa.merge_states with its gradient: out = sum_n w_n out_n and lse =
    log sum_n exp(lse_n), w_n = exp(lse_n - lse) (0 for empty parts), so
    d out_n = w_n dout and d lse_n = w_n (dlse + dout . (out_n - out))."""

    @staticmethod
    def forward(ctx, parts, lse_parts, out_dtype):
        out, lse = _core.merge_states(parts, lse_parts, out_dtype=out_dtype)
        ctx.save_for_backward(parts, lse_parts, out, lse)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        parts, lse_parts, out, lse = ctx.saved_tensors
        empty = torch.isinf(lse_parts) | torch.isinf(lse)[None]
        w = torch.where(empty, torch.zeros_like(lse_parts), torch.exp(lse_parts - lse[None]))
        g_lse = w * dlse[None] if dlse is not None else torch.zeros_like(w)
        g_parts = None
        if dout is not None:
            d = dout.float()[None]
            g_parts = (w[..., None] * d).to(parts.dtype)
            g_lse = g_lse + w * (d * (parts.float() - out.float()[None])).sum(-1)
        return g_parts, g_lse, None


def merge_attentions(attn_split, lse_split, write_lse=True, output_dtype=None):
    """Exact merge of attention over parts of the keys (sdpa.merge_states);
    gradients flow into the parts and their lse (_MergeStates).

    attn_split: [parts, B, M, (G,) H, K] or a list of [B, M, (G,) H, K];
    lse_split: [parts, B, (G,) H, M] or a list of [B, (G,) H, M].
    Returns (out [B, M, (G,) H, K], lse [B, (G,) H, M] or None)."""
    if isinstance(attn_split, (list, tuple)):
        attn_split = torch.stack(list(attn_split))
    if isinstance(lse_split, (list, tuple)):
        lse_split = torch.stack(list(lse_split))
    if attn_split.ndim not in (5, 6) or lse_split.ndim != attn_split.ndim - 1:
        raise ValueError("merge_attentions: attn_split %s and lse_split %s: expected [parts, B, "
                         "M, (G,) H, K] and [parts, B, (G,) H, M]"
                         % (list(attn_split.shape), list(lse_split.shape)))
    n, B, M = attn_split.shape[:3]
    heads = attn_split.shape[3:-1]
    K = attn_split.shape[-1]
    if tuple(lse_split.shape[:-1]) != (n, B) + tuple(heads) or lse_split.shape[-1] < M:
        raise ValueError("merge_attentions: lse_split %s does not match attn_split %s: expected "
                         "[%d, %d, %s, >= %d]" % (list(lse_split.shape), list(attn_split.shape),
                                                  n, B, ", ".join(map(str, heads)), M))
    nh = 1
    for x in heads:
        nh *= x
    parts = attn_split.reshape(n, B * M, nh, K)
    lse_parts = lse_split[..., :M].movedim(-1, 2).reshape(n, B * M, nh).float()
    out_dtype = str(output_dtype or attn_split.dtype).split(".")[-1]
    if torch.is_grad_enabled() and (parts.requires_grad or lse_parts.requires_grad):
        out, lse = _MergeStates.apply(parts, lse_parts, out_dtype)
    else:
        out, lse = _core.merge_states(parts, lse_parts, out_dtype=out_dtype)
    out = out.reshape(B, M, *heads, K)
    if not write_lse:
        return out, None
    return out, lse.reshape(B, M, *heads).movedim(1, -1)
