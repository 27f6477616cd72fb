"""float64 numpy reference of the sdpa contract (include/sdpa.h), for the Python tests.

Plain softmax attention, one formula per modifier, written from the header's
semantics and nothing else:

    s = scale * q.k ; softcap ; + bias ; - alibi * |i + s_k - s_q - j| ; mask
    lse = log sum exp s ; p = exp(s - lse) ; out = p v
"""
import numpy as np


def _expand_kv(x, h):
    hk = x.shape[2]
    return np.repeat(x, h // hk, axis=2)


def keep_mask(s_q, s_k, causal=False, align="bottom-right", window=(-1, -1)):
    i = np.arange(s_q)[:, None]
    j = np.arange(s_k)[None, :]
    off = s_k - s_q if align == "bottom-right" else 0
    left, right = window
    if causal:
        right = 0
    keep = np.ones((s_q, s_k), dtype=bool)
    if left >= 0:
        keep &= j >= i + off - left
    if right >= 0:
        keep &= j <= i + off + right
    return keep


def scores(q, k, *, causal=False, align="bottom-right", window=(-1, -1), softcap=0.0,
           scale=None, alibi_slopes=None, bias=None):
    """(s [b, h, s_q, s_k] masked with -inf, capped-derivative factor or None)."""
    q = np.asarray(q, np.float64)
    b, s_q, h, d = q.shape
    kk = _expand_kv(np.asarray(k, np.float64), h)
    s_k = kk.shape[1]
    if scale is None or scale == 0:
        scale = 1.0 / np.sqrt(d)
    s = np.einsum("bihd,bjhd->bhij", q, kk) * scale
    dcap = None
    if softcap and softcap > 0:
        t = np.tanh(s / softcap)
        s = softcap * t
        dcap = 1.0 - t * t
    if bias is not None:
        bb = np.asarray(bias, np.float64)
        while bb.ndim < 4:
            bb = bb[None]
        s = s + bb
    if alibi_slopes is not None:
        sl = np.asarray(alibi_slopes, np.float64)
        sl = sl[None, :, None, None] if sl.ndim == 1 else sl[:, :, None, None]
        i = np.arange(s_q)[:, None]
        j = np.arange(s_k)[None, :]
        s = s - sl * np.abs(i + s_k - s_q - j)
    keep = keep_mask(s_q, s_k, causal, align, window)
    s = np.where(keep[None, None], s, -np.inf)
    return s, dcap


def attention(q, k, v, *, lowp_dtype=None, **mods):
    """(out [b, s_q, h, d_v], lse [b, h, s_q], p [b, h, s_q, s_k]) in float64.

    lowp_dtype (np.float16 / np.float32): the "storage-dtype" variant used for the
    tolerance: p rounded to that dtype before p @ v, out rounded at the end."""
    s, _ = scores(q, k, **mods)
    h = np.asarray(q).shape[2]
    vv = _expand_kv(np.asarray(v, np.float64), h)
    m = s.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    e = np.exp(s - m)
    den = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(empty, np.inf, m + np.log(den))
        p = np.where(empty, 0.0, e / np.where(den == 0, 1, den))
    pp = p if lowp_dtype is None else p.astype(lowp_dtype).astype(np.float64)
    out = np.einsum("bhij,bjhd->bihd", pp, vv)
    if lowp_dtype is not None:
        out = out.astype(lowp_dtype).astype(np.float64)
    return out, lse[..., 0], p


def attention_bwd(dout, q, k, v, *, bias_shape=None, **mods):
    """float64 gradients (dq, dk, dv, dbias) of sum(out * dout); dk/dv summed over
    each GQA group; dbias summed to bias_shape (4-D) if given."""
    q64 = np.asarray(q, np.float64)
    b, s_q, h, d = q64.shape
    hk = np.asarray(k).shape[2]
    g = h // hk
    out, lse, p = attention(q, k, v, **mods)
    s, dcap = scores(q, k, **mods)
    do = np.asarray(dout, np.float64)
    vv = _expand_kv(np.asarray(v, np.float64), h)
    kk = _expand_kv(np.asarray(k, np.float64), h)
    scale = mods.get("scale") or 1.0 / np.sqrt(d)
    dv_full = np.einsum("bhij,bihd->bjhd", p, do)
    dp = np.einsum("bihd,bjhd->bhij", do, vv)
    delta = np.einsum("bihd,bihd->bhi", do, out)[..., None]
    ds = p * (dp - delta)  # gradient w.r.t. the (capped, biased) scores
    dbias = None
    if bias_shape is not None:
        dbias = ds
        for ax in range(3):
            if bias_shape[ax] == 1:
                dbias = dbias.sum(axis=ax, keepdims=True)
    dsr = ds if dcap is None else ds * dcap  # w.r.t. the raw scale * q.k
    dq = np.einsum("bhij,bjhd->bihd", dsr, kk) * scale
    dk_full = np.einsum("bhij,bihd->bjhd", dsr, q64) * scale
    dk = dk_full.reshape(b, -1, hk, g, d).sum(axis=3)
    dv = dv_full.reshape(b, -1, hk, g, dv_full.shape[-1]).sum(axis=3)
    return dq, dk, dv, dbias


def bound(ref, lowp, atol):
    """The C harness' rule: 2 * max |lowp - ref| + atol (finite elements)."""
    fin = np.isfinite(ref)
    err = np.abs(lowp - ref)[fin]
    return 2.0 * (err.max() if err.size else 0.0) + atol


ATOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 4e-3}


def max_err(got, ref):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    both_inf = np.isinf(got) & np.isinf(ref) & (np.sign(got) == np.sign(ref))
    with np.errstate(invalid="ignore"):
        e = np.where(both_inf, 0.0, np.abs(got - ref))
    e = np.where(np.isnan(e), np.inf, e)
    return e.max() if e.size else 0.0
