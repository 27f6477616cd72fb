"""float64 torch reference of the sdpa contract (autograd gives the reference
gradients). Only imported by tests that have torch."""
import math

import torch


def keep_mask(s_q, s_k, causal=False, align="bottom-right", window=(-1, -1), device="cpu"):
    i = torch.arange(s_q, device=device)[:, None]
    j = torch.arange(s_k, device=device)[None, :]
    off = s_k - s_q if align == "bottom-right" else 0
    left, right = window
    if causal:
        right = 0
    keep = torch.ones(s_q, s_k, dtype=torch.bool, device=device)
    if left >= 0:
        keep &= j >= i + off - left
    if right >= 0:
        keep &= j <= i + off + right
    return keep


def attention(q, k, v, *, causal=False, align="bottom-right", window=(-1, -1), softcap=0.0,
              scale=None, alibi_slopes=None, bias=None, dtype=torch.float64):
    """q [b, s_q, h, d], k/v [b, s_k, h_k, d(_v)] -> (out [b, s_q, h, d_v], lse [b, h, s_q]),
    computed in `dtype` (differentiable; rows with no key give 0 and +inf)."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    b, s_q, h, d = q.shape
    s_k, hk = k.shape[1], k.shape[2]
    k = k.repeat_interleave(h // hk, dim=2)
    v = v.repeat_interleave(h // hk, dim=2)
    scale = scale or 1.0 / math.sqrt(d)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap and softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.to(dtype)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(dtype)
        sl = sl[None, :, None, None] if sl.dim() == 1 else sl[:, :, None, None]
        i = torch.arange(s_q, device=q.device)[:, None]
        j = torch.arange(s_k, device=q.device)[None, :]
        s = s - sl * (i + s_k - s_q - j).abs().to(dtype)
    keep = keep_mask(s_q, s_k, causal, align, window, q.device)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isinf(lse) & (lse < 0)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(lse), lse)[..., None])
    p = p.masked_fill(empty[..., None], 0.0)
    out = torch.einsum("bhij,bjhd->bihd", p, v)
    lse = torch.where(empty, torch.full_like(lse, float("inf")), lse)
    return out, lse
