"""Python binding on the CPU backend: numpy against the float64 reference
(reference.py), errors, merge_states, varlen, KV cache, the ABI mirror; torch-CPU
autograd and the flash_attn / xformers front ends (skipped without torch).

Tolerance (as the C harness): max |got - ref| <= 2 * max |lowp - ref| + atol,
lowp being the reference with p and out rounded to the storage dtype."""
import ctypes
import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")

import sdpa  # noqa: E402
from sdpa import SdpaError  # noqa: E402
import reference as R  # noqa: E402
from abi_layout import assert_abi_layout  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def _lib_or_skip():
    try:
        sdpa.version()
    except OSError as e:
        # A library named explicitly (CTest sets SDPA_LIBRARY) that does not load is a
        # failure, never a skip: otherwise a broken build would pass as "all skipped".
        if os.environ.get("SDPA_LIBRARY"):
            pytest.fail("SDPA_LIBRARY=%s does not load: %s" % (os.environ["SDPA_LIBRARY"], e))
        pytest.skip("libsdpa not loadable: %s" % e)


@pytest.fixture(autouse=True)
def _need_lib(request):
    if request.node.get_closest_marker("nolib") is None:
        _lib_or_skip()


def rnd(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def check(got, ref, lowp, dtype, what):
    b = R.bound(ref, lowp, R.ATOL[np.dtype(dtype).name])
    e = R.max_err(got, ref)
    assert e <= b, "%s: max err %.3g > bound %.3g" % (what, e, b)


# ---- forward, dense -------------------------------------------------------------------

SHAPES = [
    # b, s_q, s_k, h, h_k, d, d_v
    (2, 17, 17, 4, 4, 32, 32),
    (1, 5, 33, 4, 2, 16, 24),   # GQA, s_q < s_k, d != d_v
    (2, 40, 9, 6, 1, 8, 8),     # MQA, s_q > s_k (bottom-right: empty rows)
]

MODS = [
    {},
    {"causal": True},
    {"causal": True, "align": "top-left"},
    {"window": (3, 2)},
    {"window": (4, -1), "align": "top-left"},
    {"softcap": 2.5, "scale": 0.4},
    {"alibi": True},
    {"bias": "broadcast"},
    {"bias": "full", "causal": True},
]


def _mods(rng, m, b, h, s_q, s_k, dtype):
    m = dict(m)
    if m.pop("alibi", False):
        m["alibi_slopes"] = rng.uniform(0.05, 0.5, size=(h,)).astype(np.float32)
    kind = m.pop("bias", None)
    if kind == "broadcast":  # [1, h, 1, s_k] read through stride-0 views as [b, h, s_q, s_k]
        base = rnd(rng, (1, h, 1, s_k), dtype)
        m["bias"] = np.broadcast_to(base, (b, h, s_q, s_k))
    elif kind == "full":
        m["bias"] = rnd(rng, (b, h, s_q, s_k), dtype)
    return m


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mods", MODS, ids=lambda m: ",".join(sorted(m)) or "plain")
def test_forward_matches_reference(dtype, shape, mods):
    rng = np.random.default_rng(1234)
    b, s_q, s_k, h, hk, d, dv = shape
    q, k, v = rnd(rng, (b, s_q, h, d), dtype), rnd(rng, (b, s_k, hk, d), dtype), \
        rnd(rng, (b, s_k, hk, dv), dtype)
    m = _mods(rng, mods, b, h, s_q, s_k, dtype)
    out, lse = sdpa.forward(q, k, v, return_lse=True, **m)
    assert out.shape == (b, s_q, h, dv) and out.dtype == dtype and isinstance(out, np.ndarray)
    assert lse.shape == (b, h, s_q) and lse.dtype == np.float32
    ref, ref_lse, _ = R.attention(q, k, v, **m)
    lowp, _, _ = R.attention(q, k, v, lowp_dtype=dtype, **m)
    check(out, ref, lowp, dtype, "out")
    fin = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), fin), "lse: +inf exactly on the rows with no key"
    assert np.all(lse[~fin] == np.inf)
    assert R.max_err(lse[fin], ref_lse[fin]) <= 1e-4 * max(1.0, np.abs(ref_lse[fin]).max(initial=0))
    assert np.all(out[np.broadcast_to(~fin.transpose(0, 2, 1)[..., None], out.shape)] == 0)


def test_forward_out_and_threads():
    rng = np.random.default_rng(1)
    q, k, v = (rnd(rng, (1, 8, 2, 16), np.float32) for _ in range(3))
    out = np.full((1, 8, 2, 16), np.nan, np.float32)
    res = sdpa.forward(q, k, v, out=out, num_threads=1)
    assert res is out
    ref, _, _ = R.attention(q, k, v)
    assert R.max_err(out, ref) < 1e-4


def test_forward_strided_inputs():
    """Non-contiguous views (last dim contiguous) are passed without copies."""
    rng = np.random.default_rng(2)
    qkv = rnd(rng, (2, 11, 3, 4, 16), np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    out = sdpa.forward(q, k, v, causal=True)
    ref, _, _ = R.attention(q, k, v, causal=True)
    assert R.max_err(out, ref) < 1e-4


def test_return_probs():
    rng = np.random.default_rng(3)
    q, k, v = rnd(rng, (1, 6, 2, 8), np.float32), rnd(rng, (1, 9, 2, 8), np.float32), \
        rnd(rng, (1, 9, 2, 8), np.float32)
    out, lse, probs = sdpa.forward(q, k, v, causal=True, return_probs=True)
    assert probs.shape == (1, 2, 6, 9)
    _, _, p = R.attention(q, k, v, causal=True)
    assert R.max_err(probs, p) < 1e-5


def test_dropout_deterministic_and_probs_mark():
    rng = np.random.default_rng(4)
    q, k, v = (rnd(rng, (1, 16, 2, 16), np.float32) for _ in range(3))
    a = sdpa.forward(q, k, v, dropout_p=0.3, seed=42, offset=0, return_probs=True)
    b = sdpa.forward(q, k, v, dropout_p=0.3, seed=42, offset=0, return_probs=True)
    c = sdpa.forward(q, k, v, dropout_p=0.3, seed=43, offset=0)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[2])
    assert not np.array_equal(a[0], c)
    probs = a[2]
    dropped = probs < 0
    frac = dropped.mean()
    assert 0.15 < frac < 0.45
    # out = (kept p / (1 - p_drop)) @ v
    pk = np.where(dropped, 0.0, probs.astype(np.float64)) / 0.7
    ref = np.einsum("bhij,bjhd->bihd", pk, v.astype(np.float64))
    assert R.max_err(a[0], ref) < 1e-4


# ---- errors ---------------------------------------------------------------------------------

def test_error_bad_head_dim_names_the_argument():
    rng = np.random.default_rng(5)
    q = rnd(rng, (1, 4, 2, 16), np.float32)
    k = rnd(rng, (1, 4, 2, 8), np.float32)  # d differs from q's
    v = rnd(rng, (1, 4, 2, 16), np.float32)
    with pytest.raises(SdpaError) as ei:
        sdpa.forward(q, k, v)
    e = ei.value
    assert e.status == sdpa.SDPA_ERR_INVALID_ARGUMENT
    assert e.status_name == "SDPA_ERR_INVALID_ARGUMENT"
    assert "k.shape" in e.message and e.message in str(e)
    assert "8" in e.message and "16" in e.message


def test_error_bad_heads_names_the_argument():
    rng = np.random.default_rng(5)
    q = rnd(rng, (1, 4, 3, 16), np.float32)
    k = rnd(rng, (1, 4, 2, 16), np.float32)  # 3 % 2 != 0
    with pytest.raises(SdpaError) as ei:
        sdpa.forward(q, k, k)
    assert ei.value.status == sdpa.SDPA_ERR_INVALID_ARGUMENT
    assert "shape[2]" in ei.value.message and "3" in ei.value.message


def test_error_strided_last_dim_names_the_argument():
    rng = np.random.default_rng(5)
    q = rnd(rng, (1, 4, 2, 32), np.float32)
    with pytest.raises(SdpaError) as ei:
        sdpa.forward(q, q[..., ::2], q[..., ::2])
    assert "k.stride" in ei.value.message


def test_error_from_the_binding():
    rng = np.random.default_rng(5)
    q = rnd(rng, (4, 16), np.float32)
    with pytest.raises(SdpaError) as ei:
        sdpa.forward(q, q, q)
    assert "q" in ei.value.message and ei.value.status == sdpa.SDPA_ERR_INVALID_ARGUMENT
    with pytest.raises(SdpaError) as ei:
        sdpa.forward(q[None, None].astype(np.float64), q[None, None], q[None, None])
    assert "q" in ei.value.message and "float64" in ei.value.message
    with pytest.raises(SdpaError):
        sdpa.forward(object(), q, q)
    with pytest.raises(SdpaError) as ei:
        sdpa.forward(q[None, None], q[None, None], q[None, None], align="middle")
    assert "align" in ei.value.message


@pytest.mark.nolib
def test_error_is_runtime_error_and_picklable():
    import pickle
    e = SdpaError(2, "x")
    assert isinstance(e, RuntimeError)
    e2 = pickle.loads(pickle.dumps(e))
    assert e2.status == 2 and e2.message == "x"


# ---- backward -----------------------------------------------------------------------------

BWD_MODS = [{}, {"causal": True}, {"window": (2, 3)}, {"softcap": 3.0}, {"alibi": True},
            {"bias": "broadcast"}, {"bias": "full"}]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("mods", BWD_MODS, ids=lambda m: ",".join(sorted(m)) or "plain")
def test_backward_matches_reference(dtype, mods):
    rng = np.random.default_rng(6)
    b, s_q, s_k, h, hk, d, dv = 2, 13, 19, 4, 2, 16, 8
    q, k, v = rnd(rng, (b, s_q, h, d), dtype), rnd(rng, (b, s_k, hk, d), dtype), \
        rnd(rng, (b, s_k, hk, dv), dtype)
    m = _mods(rng, mods, b, h, s_q, s_k, dtype)
    dout = rnd(rng, (b, s_q, h, dv), dtype)
    out, lse = sdpa.forward(q, k, v, return_lse=True, **m)
    want_db = "bias" in m
    res = sdpa.backward(dout, q, k, v, out, lse, dbias=want_db, **m)
    bias_shape = None
    if want_db:
        bias_shape = (1, h, 1, s_k) if mods.get("bias") == "broadcast" else (b, h, s_q, s_k)
        assert res[3].shape == bias_shape
    ref = R.attention_bwd(dout, q, k, v, bias_shape=bias_shape, **m)
    names = ("dq", "dk", "dv", "dbias")
    atol = {np.float32: 1e-4, np.float16: 1e-2}[dtype]
    for i, got in enumerate(res):
        r = ref[i]
        assert got.shape == r.shape and got.dtype == dtype, names[i]
        scale = max(1.0, np.abs(r).max())
        lowp = r.astype(dtype).astype(np.float64)
        b_ = 2 * np.abs(lowp - r).max() + atol * scale
        e = R.max_err(got, r)
        assert e <= b_, "%s: max err %.3g > bound %.3g" % (names[i], e, b_)


def test_backward_deterministic_bitwise():
    rng = np.random.default_rng(7)
    q, k, v, do = (rnd(rng, (2, 32, 4, 16), np.float32) for _ in range(4))
    out, lse = sdpa.forward(q, k, v, causal=True, return_lse=True)
    a = sdpa.backward(do, q, k, v, out, lse, causal=True, deterministic=True)
    b = sdpa.backward(do, q, k, v, out, lse, causal=True, deterministic=True)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


# ---- varlen ---------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_varlen_matches_dense_per_sequence(causal):
    rng = np.random.default_rng(8)
    lq, lk = [3, 7, 1, 5], [4, 7, 6, 2]
    h, hk, d = 4, 2, 16
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = rnd(rng, (cq[-1], h, d), np.float32)
    k = rnd(rng, (ck[-1], hk, d), np.float32)
    v = rnd(rng, (ck[-1], hk, d), np.float32)
    out, lse = sdpa.forward(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(lq),
                            max_seqlen_k=max(lk), causal=causal, return_lse=True)
    assert out.shape == (cq[-1], h, d) and lse.shape == (h, cq[-1])
    for i in range(len(lq)):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        ref, ref_lse, _ = R.attention(q[None, qs], k[None, ks], v[None, ks], causal=causal)
        assert R.max_err(out[qs], ref[0]) < 1e-4, i
        assert R.max_err(lse[:, qs], ref_lse[0]) < 1e-4, i
    # max_seqlen 0 = computed by the library (CPU); python int lists accepted for indices
    out2 = sdpa.forward(q, k, v, cu_seqlens_q=list(cq), cu_seqlens_k=ck.astype(np.int64),
                        causal=causal)
    assert R.max_err(out2, out) == 0
    # backward
    dout = rnd(rng, out.shape, np.float32)
    dq, dk, dv = sdpa.backward(dout, q, k, v, out, lse, cu_seqlens_q=cq, cu_seqlens_k=ck,
                               max_seqlen_q=max(lq), max_seqlen_k=max(lk), causal=causal)
    for i in range(len(lq)):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        r = R.attention_bwd(dout[None, qs], q[None, qs], k[None, ks], v[None, ks], causal=causal)
        assert R.max_err(dq[qs], r[0][0]) < 1e-4
        assert R.max_err(dk[ks], r[1][0]) < 1e-4
        assert R.max_err(dv[ks], r[2][0]) < 1e-4


# ---- KV cache ---------------------------------------------------------------------------------

@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_append_matches_dense(paged):
    rng = np.random.default_rng(9)
    b, hk, h, d, s_new, s_q, s_cache = 3, 2, 4, 16, 2, 2, 64
    seqlens = np.array([5, 0, 30], np.int32)
    k_new = rnd(rng, (b, s_new, hk, d), np.float32)
    v_new = rnd(rng, (b, s_new, hk, d), np.float32)
    q = rnd(rng, (b, s_q, h, d), np.float32)
    kc = rnd(rng, (b, s_cache, hk, d), np.float32)
    vc = rnd(rng, (b, s_cache, hk, d), np.float32)
    k_full, v_full = kc.copy(), vc.copy()
    for i in range(b):
        k_full[i, seqlens[i]:seqlens[i] + s_new] = k_new[i]
        v_full[i, seqlens[i]:seqlens[i] + s_new] = v_new[i]
    kw = {}
    if paged:
        page = 16
        nblk = s_cache // page
        perm = rng.permutation(b * nblk).astype(np.int32)
        table = perm.reshape(b, nblk)
        kp = np.empty((b * nblk, page, hk, d), np.float32)
        vp = np.empty_like(kp)
        for i in range(b):
            for j in range(nblk):
                kp[table[i, j]] = kc[i, j * page:(j + 1) * page]
                vp[table[i, j]] = vc[i, j * page:(j + 1) * page]
        kc_arg, vc_arg, kw["block_table"] = kp, vp, table
    else:
        kc_arg, vc_arg = kc, vc
    out, lse = sdpa.forward(q, kc_arg, vc_arg, cache_seqlens=seqlens, k_new=k_new, v_new=v_new,
                            causal=True, return_lse=True, **kw)
    for i in range(b):
        n = seqlens[i] + s_new
        ref, ref_lse, _ = R.attention(q[i:i + 1], k_full[i:i + 1, :n], v_full[i:i + 1, :n],
                                      causal=True)
        assert R.max_err(out[i], ref[0]) < 1e-4, i
        # the new tokens were written into the cache
        if paged:
            got_k = np.concatenate([kc_arg[t] for t in kw["block_table"][i]])[:n]
        else:
            got_k = kc_arg[i, :n]
        assert np.array_equal(got_k, k_full[i, :n])


def _rotate(x, cos, sin, pos, interleaved):
    """x [s, h, d] rotated at positions pos [s] (float64)."""
    x = x.astype(np.float64).copy()
    rd = cos.shape[1] * 2
    c, s_ = cos[pos][:, None, :], sin[pos][:, None, :]
    if interleaved:
        a, b = x[..., 0:rd:2].copy(), x[..., 1:rd:2].copy()
        x[..., 0:rd:2] = a * c - b * s_
        x[..., 1:rd:2] = b * c + a * s_
    else:
        a, b = x[..., :rd // 2].copy(), x[..., rd // 2:rd].copy()
        x[..., :rd // 2] = a * c - b * s_
        x[..., rd // 2:rd] = b * c + a * s_
    return x


@pytest.mark.parametrize("interleaved", [False, True])
def test_kvcache_rotary(interleaved):
    rng = np.random.default_rng(12)
    b, hk, h, d, rd, s_new, s_cache = 2, 1, 2, 32, 16, 3, 32
    seqlens = np.array([4, 11], np.int32)
    ang = rng.uniform(0, 3, size=(s_cache, rd // 2))
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    q = rnd(rng, (b, s_new, h, d), np.float32)
    kn, vn = rnd(rng, (b, s_new, hk, d), np.float32), rnd(rng, (b, s_new, hk, d), np.float32)
    kc, vc = rnd(rng, (b, s_cache, hk, d), np.float32), rnd(rng, (b, s_cache, hk, d), np.float32)
    kc0, vc0 = kc.copy(), vc.copy()
    out = sdpa.forward(q, kc, vc, cache_seqlens=seqlens, k_new=kn, v_new=vn, rotary_cos=cos,
                       rotary_sin=sin, rotary_interleaved=interleaved, causal=True)
    for i in range(b):
        n = seqlens[i]
        pos = np.arange(n, n + s_new)
        qr = _rotate(q[i], cos, sin, pos, interleaved)
        kr = _rotate(kn[i], cos, sin, pos, interleaved)
        assert R.max_err(kc[i, n:n + s_new], kr) < 1e-5, "rotated k_new in the cache"
        assert np.array_equal(vc[i, n:n + s_new], vn[i])
        kf = np.concatenate([kc0[i, :n], kr])[None]
        vf = np.concatenate([vc0[i, :n], vn[i]])[None]
        ref, _, _ = R.attention(qr[None], kf, vf, causal=True)
        assert R.max_err(out[i], ref[0]) < 1e-4


def test_kvcache_int_seqlens_and_split():
    rng = np.random.default_rng(10)
    q = rnd(rng, (2, 1, 4, 16), np.float32)
    kc = rnd(rng, (2, 48, 4, 16), np.float32)
    vc = rnd(rng, (2, 48, 4, 16), np.float32)
    for splits in (1, 3):
        out = sdpa.forward(q, kc, vc, cache_seqlens=40, num_splits=splits)
        ref, _, _ = R.attention(q, kc[:, :40], vc[:, :40])
        assert R.max_err(out, ref) < 1e-4


# ---- merge_states --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_merge_states_equals_full_attention(dtype):
    rng = np.random.default_rng(11)
    b, s_q, s_k, h, d = 1, 7, 40, 4, 16
    q, k, v = rnd(rng, (b, s_q, h, d), dtype), rnd(rng, (b, s_k, h, d), dtype), \
        rnd(rng, (b, s_k, h, d), dtype)
    cuts = [0, 9, 9, 25, 40]  # one empty part
    outs, lses = [], []
    for a, z in zip(cuts[:-1], cuts[1:]):
        if z == a:
            outs.append(np.zeros((b, s_q, h, d), np.float32))
            lses.append(np.full((b, h, s_q), np.inf, np.float32))
            continue
        o, l_ = sdpa.forward(q, k[:, a:z], v[:, a:z], return_lse=True)
        outs.append(o.astype(np.float32))
        lses.append(l_)
    out_parts = np.stack([o[0] for o in outs])            # [n, t, h, d]
    lse_parts = np.stack([l_[0] for l_ in lses])           # [n, h, t]
    lse_parts = lse_parts.transpose(0, 2, 1)               # [n, t, h] as a strided view
    out, lse = sdpa.merge_states(out_parts, lse_parts, out_dtype="float32")
    assert out.shape == (s_q, h, d) and lse.shape == (s_q, h)
    ref, ref_lse, _ = R.attention(q, k, v)
    tol = {np.float32: 1e-4, np.float16: 3e-3}[dtype]
    assert R.max_err(out, ref[0]) < tol
    assert R.max_err(lse, ref_lse[0].T) < 1e-3


def test_merge_states_all_empty():
    out_parts = np.ones((2, 3, 1, 4), np.float32)
    lse_parts = np.full((2, 3, 1), np.inf, np.float32)
    out, lse = sdpa.merge_states(out_parts, lse_parts)
    assert np.all(out == 0) and np.all(lse == np.inf)


# ---- registry, explain, version --------------------------------------------------------------------

def test_kernels_explain_version():
    ks = sdpa.kernels()
    assert ks and all({"name", "op", "device", "dtypes", "features"} <= set(x) for x in ks)
    assert any(x["op"] == "fwd" and x["device"] == "cpu" for x in ks)
    names = {x["name"] for x in ks}
    q = np.zeros((1, 4, 2, 16), np.float32)
    text = sdpa.explain(q, q, q, causal=True)
    assert isinstance(text, str) and any(n in text for n in names)
    text = sdpa.explain(q, q, q, causal=True, backward=True)
    assert any(n in text for n in names)
    assert sdpa.version() == sdpa.__version__
    assert sdpa.cuda_available() in (False, True)
    assert sdpa.status_string(1) == "SDPA_ERR_INVALID_ARGUMENT"
    fwd = [x["name"] for x in ks if x["op"] == "fwd" and x["device"] == "cpu"][0]
    out = sdpa.forward(q, q, q, kernel=fwd)
    assert out.shape == q.shape
    with pytest.raises(SdpaError) as ei:
        sdpa.forward(q, q, q, kernel="no_such_kernel")
    assert "no_such_kernel" in ei.value.message


def test_import_without_torch_and_numpy():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['numpy'] = None; "
            "import sdpa; print(sdpa.version())")
    env = dict(os.environ)
    if os.environ.get("SDPA_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = os.path.join(REPO, "python")
    env["SDPA_LIBRARY"] = sdpa.library_path()
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == sdpa.version()


@pytest.mark.nolib
def test_abi_layout():
    """Every size and field offset of the ctypes mirror equals the C compiler's."""
    from sdpa import _lib as L
    assert_abi_layout("sdpa.h", [L.sdpa_tensor, L.sdpa_attn, L.sdpa_fwd_desc, L.sdpa_bwd_desc,
                                 L.sdpa_merge_desc, L.sdpa_kernel_info])


# ---- the per-call fast paths (host cost): packed tensors, the descriptor template ----------------

_CODES = {"float32": sdpa._lib.SDPA_DTYPE_F32, "float16": sdpa._lib.SDPA_DTYPE_F16,
          "bfloat16": sdpa._lib.SDPA_DTYPE_BF16, "int32": sdpa._lib.SDPA_DTYPE_I32}


def _fill_by_fields(data, dtype_name, shape, strides):
    """The reference sdpa_tensor: ctypes fields set one by one on a zeroed struct."""
    t = sdpa._lib.sdpa_tensor()
    t.data, t.dtype, t.rank = data, _CODES[dtype_name], len(shape)
    for i, (n, st) in enumerate(zip(shape, strides)):
        t.shape[i], t.stride[i] = n, st
    return bytes(t)


def _poisoned_tensor():
    return sdpa._lib.sdpa_tensor.from_buffer_copy(b"\xa5" * ctypes.sizeof(sdpa._lib.sdpa_tensor))


@pytest.mark.nolib
def test_fill_packs_every_field():
    """fill() writes an sdpa_tensor with one struct.pack_into: every byte (the target is
    poisoned first) equals the struct set field by field, for each rank 0..5, dtype
    and stride pattern."""
    from sdpa import _tensors as T
    base = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.float32).reshape(2, 3, 4, 5, 6)
    cases = [base, base[:, ::2], base[0], base[0, 1, :, ::2], base[0, 0, 0], base[0, 0, 0, 0],
             base[0, 0, 0, 0, 2, ...], np.broadcast_to(base[:1], (4, 3, 4, 5, 6)),
             base.astype(np.float16)[..., 1:], np.zeros((3,), np.int32)]
    for x in cases:
        t = _poisoned_tensor()
        T.fill(t, x, "x")
        ref = _fill_by_fields(x.ctypes.data, x.dtype.name, x.shape,
                              [s // x.itemsize for s in x.strides])
        assert bytes(t) == ref, (x.shape, x.strides, x.dtype)
    with pytest.raises(SdpaError) as ei:
        T.fill(_poisoned_tensor(), np.zeros((1,) * 6, np.float32), "q")
    assert "q: rank 6 exceeds SDPA_MAX_RANK (5)" in ei.value.message


def test_descriptor_template_stays_clean():
    """Each call copies a cached template descriptor and writes only what differs from
    the keywords' defaults: a call with every modifier leaves the template as it was
    (a default call after it gets the bytes of one before it), and arrays of another
    dtype in the next call are described with their own dtype."""
    from sdpa import _core, _lib as L
    rng = np.random.default_rng(14)
    q, k, v = (rnd(rng, (1, 4, 2, 8), np.float32) for _ in range(3))
    out, lse = rnd(rng, (1, 4, 2, 8), np.float32), rnd(rng, (1, 2, 4), np.float32)
    first = bytes(_core._build_fwd(q, k, v, out=out)[0])
    d = _core._build_fwd(q, k, v, out=out, lse=lse, causal=True, align="top-left", window=(2, 1),
                         scale=0.5, softcap=1.5, dropout_p=0.25, seed=3, offset=4, num_threads=2,
                         num_splits=2, rotary_interleaved=True, kernel="cpu",
                         alibi_slopes=np.ones(2, np.float32), bias=rnd(rng, (4, 4), np.float32),
                         cache_seqlens=np.array([3], np.int32))[0]
    a = d.attn
    assert (a.causal, a.align, a.window_left, a.window_right) == (1, L.SDPA_ALIGN_TOP_LEFT, 2, 1)
    assert (a.scale, a.softcap, a.dropout_p) == (0.5, 1.5, 0.25)
    assert (a.dropout_seed, a.dropout_offset, a.num_threads) == (3, 4, 2)
    assert (d.num_splits, d.rotary_interleaved, a.kernel) == (2, 1, b"cpu")
    assert a.alibi_slopes.rank == 1 and a.bias.rank == 4 and d.cache_seqlens.rank == 1
    assert bytes(_core._build_fwd(q, k, v, out=out)[0]) == first
    # the template: the library's init (this library's defaults are the keywords')
    for cls in (L.sdpa_fwd_desc, L.sdpa_bwd_desc, L.sdpa_merge_desc):
        assert bytes(L.new_desc(cls)) == bytes(L._init_desc(cls)), cls.__name__
    h = _core._build_fwd(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
                         out=out.astype(np.float16))[0]
    assert h.attn.q.dtype == L.SDPA_DTYPE_F16 and h.out.dtype == L.SDPA_DTYPE_F16
    assert _core._build_fwd(q, k, v, out=out)[0].attn.q.dtype == L.SDPA_DTYPE_F32


def test_call_keeps_no_array_alive():
    """The binding's caches hold types, dtype codes and template bytes only: once a
    call returns, no input or output is referenced by it."""
    import gc
    import weakref
    rng = np.random.default_rng(15)
    q, k, v, out = (rnd(rng, (1, 4, 2, 8), np.float32) for _ in range(4))
    seqlens = np.array([4], np.int64)  # converted to int32 by the binding (a copy)
    refs = [weakref.ref(x) for x in (q, k, v, out, seqlens)]
    sdpa.forward(q, k, v, out=out, cache_seqlens=seqlens)
    sdpa.forward(q, k, v, return_lse=True)
    del q, k, v, out, seqlens
    gc.collect()
    assert all(r() is None for r in refs)


# ---- torch on the CPU backend -------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch")


TORCH_MODS = [{}, {"causal": True}, {"window": (3, 1)}, {"softcap": 2.0}, {"alibi": True},
              {"bias": True}]


@pytest.mark.parametrize("mods", TORCH_MODS, ids=lambda m: ",".join(sorted(m)) or "plain")
@pytest.mark.parametrize("use_custom_op", [True, False])
def test_torch_autograd_matches_float64(mods, use_custom_op):
    torch = _torch()
    import torch_reference as TR
    from sdpa import torch_ops
    if use_custom_op and not torch_ops.HAVE_CUSTOM_OP:
        pytest.skip("torch without torch.library.custom_op")
    g = torch.Generator().manual_seed(0)
    b, s_q, s_k, h, hk, d = 2, 11, 14, 4, 2, 16
    mk = lambda *s: torch.randn(*s, generator=g).requires_grad_()  # noqa: E731
    q, k, v = mk(b, s_q, h, d), mk(b, s_k, hk, d), mk(b, s_k, hk, d)
    m = dict(mods)
    bias = None
    if m.pop("alibi", False):
        m["alibi_slopes"] = torch.rand(h, generator=g) * 0.3 + 0.05
    if m.pop("bias", False):
        # a [h, s_k] bias broadcast to [b, h, s_q, s_k] by expand (stride 0)
        bias = mk(1, h, 1, s_k)
        m["bias"] = bias.expand(b, h, s_q, s_k)
    out = torch_ops.attention(q, k, v, use_custom_op=use_custom_op, **m)
    ref, _ = TR.attention(q, k, v, **m)
    dout = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad(out, [q, k, v] + ([bias] if bias is not None else []), dout)
    rgrads = torch.autograd.grad(ref, [q, k, v] + ([bias] if bias is not None else []),
                                 dout.double())
    assert (out.double() - ref).abs().max() < 1e-4
    for x, r in zip(grads, rgrads):
        assert x.shape == r.shape
        assert (x.double() - r).abs().max() < 1e-4 * max(1.0, r.abs().max().item())


def test_torch_fill_packs_every_field():
    """fill() on torch tensors (views, bf16, a Parameter: a subclass, classified by
    its own type) equals the sdpa_tensor set field by field."""
    torch = _torch()
    from sdpa import _tensors as T
    base = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    cases = [base, base[:, 1:, ::2], base.transpose(1, 2), base.to(torch.bfloat16)[0],
             base[0, 0, 0, 0], base.expand(3, 2, 3, 4, 5), torch.zeros(0, 4),
             torch.nn.Parameter(base.clone(), requires_grad=False),
             torch.tensor([1], dtype=torch.int32)]
    for x in cases:
        t = _poisoned_tensor()
        T.fill(t, x, "x")
        ref = _fill_by_fields(x.data_ptr(), str(x.dtype).replace("torch.", ""), x.shape, x.stride())
        assert bytes(t) == ref, (x.shape, x.stride(), x.dtype)
    with pytest.raises(SdpaError) as ei:
        T.fill(_poisoned_tensor(), base.double(), "k")
    assert "k: dtype torch.float64 is not supported" in ei.value.message


def test_torch_eager_path_matches_the_custom_op():
    """Plain eager calls skip the custom ops' dispatch (host cost) and give the op's
    results: outputs, gradients, the KV cache and its version counter bitwise equal;
    under a dispatch mode or the profiler the op itself runs (they see sdpa::fwd)."""
    torch = _torch()
    from sdpa import torch_ops
    if not torch_ops.HAVE_CUSTOM_OP:
        pytest.skip("no torch.library.custom_op")
    from torch.utils._python_dispatch import TorchDispatchMode
    g = torch.Generator().manual_seed(16)
    q0, k0, v0 = torch.randn(2, 6, 4, 8, generator=g), torch.randn(2, 7, 2, 8, generator=g), \
        torch.randn(2, 7, 2, 8, generator=g)
    b0 = torch.randn(1, 4, 1, 7, generator=g)
    dout = torch.randn(2, 6, 4, 8, generator=g)
    res = {}
    for op in (True, None):
        q, k, v, b = (x.clone().requires_grad_() for x in (q0, k0, v0, b0))
        out, lse = torch_ops.attention(q, k, v, bias=b, causal=True, dropout_p=0.2, seed=9,
                                       return_lse=True, use_custom_op=op)
        grads = torch.autograd.grad(out, (q, k, v, b), dout)
        with torch.no_grad():
            plain = torch_ops.attention(q, k, v, window=(2, 1), use_custom_op=op)
        res[op] = (out, lse, plain) + grads
        assert ("SdpaAttention" in out.grad_fn.name()) == (op is None)
    for a, b in zip(res[True], res[None]):
        assert torch.equal(a, b)

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Log():
        torch_ops.attention(q0, k0, v0)
    assert any("sdpa.fwd" in f for f in seen), seen
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch_ops.attention(q0, k0, v0)
    assert any(e.name == "sdpa::fwd" for e in prof.events())

    # KV cache (in place): contents, outputs and the caches' version counters
    qd, kn, vn = torch.randn(2, 1, 4, 8, generator=g), torch.randn(2, 1, 2, 8, generator=g), \
        torch.randn(2, 1, 2, 8, generator=g)
    seq = torch.tensor([3, 5], dtype=torch.int32)
    kv = {}
    for op in (True, None):
        kc, vc = torch.randn(2, 16, 2, 8), torch.randn(2, 16, 2, 8)
        kc.copy_(k0[:, :1].expand(2, 16, 2, 8))
        vc.copy_(v0[:, :1].expand(2, 16, 2, 8))
        with torch.no_grad():
            out, lse = torch_ops.kvcache_attention(qd, kc, vc, seq, k_new=kn, v_new=vn,
                                                   causal=True, use_custom_op=op)
        kv[op] = (out, lse, kc, vc, kc._version, vc._version)
    for a, b in zip(kv[True], kv[None]):
        assert torch.equal(a, b) if torch.is_tensor(a) else a == b


def test_torch_forward_routes_through_autograd():
    torch = _torch()
    q = torch.randn(1, 5, 2, 8, requires_grad=True)
    out, lse = sdpa.forward(q, q, q, causal=True, return_lse=True)
    assert out.requires_grad and lse.requires_grad  # lse is differentiable (dlse)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    with torch.no_grad():
        o2 = sdpa.forward(q, q, q, causal=True)
    assert torch.equal(o2, out.detach())


def test_torch_opcheck():
    torch = _torch()
    from sdpa import torch_ops
    if not torch_ops.HAVE_CUSTOM_OP or not hasattr(torch.library, "opcheck"):
        pytest.skip("no torch.library.custom_op / opcheck")
    q = torch.randn(1, 6, 2, 8, requires_grad=True)
    k = torch.randn(1, 7, 1, 8, requires_grad=True)
    v = torch.randn(1, 7, 1, 8, requires_grad=True)
    bias = torch.randn(1, 2, 6, 7, requires_grad=True)
    args = (q, k, v, bias, None, None, None, None, 0, 0, 0.0, 0.0, True, 0, -1, -1, 0.0, 0, 0,
            False, 0, "", False)
    torch.library.opcheck(torch.ops.sdpa.fwd.default, args)
    # varlen with probs: the fake kernel's probs is [b, h, max_seqlen_q, max_seqlen_k] too
    qv = torch.randn(9, 2, 8, requires_grad=True)
    kv = torch.randn(11, 1, 8, requires_grad=True)
    vv = torch.randn(11, 1, 8, requires_grad=True)
    cu_q = torch.tensor([0, 4, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 11], dtype=torch.int32)
    args = (qv, kv, vv, None, None, cu_q, cu_k, None, 5, 7, 0.0, 0.0, True, 0, -1, -1, 0.0, 0,
            0, True, 0, "", False)
    torch.library.opcheck(torch.ops.sdpa.fwd.default, args)


def test_torch_compile_aot_eager():
    torch = _torch()
    from sdpa import torch_ops
    if not torch_ops.HAVE_CUSTOM_OP:
        pytest.skip("no torch.library.custom_op")
    from sdpa.flash_attn_interface import flash_attn_func

    def f(q, k, v):
        return flash_attn_func(q, k, v, causal=True).float().square().sum()

    q = torch.randn(2, 9, 4, 16, requires_grad=True)
    k = torch.randn(2, 9, 2, 16, requires_grad=True)
    v = torch.randn(2, 9, 2, 16, requires_grad=True)
    eager = torch.autograd.grad(f(q, k, v), [q, k, v])
    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    comp = torch.autograd.grad(cf(q, k, v), [q, k, v])
    for a, b in zip(eager, comp):
        assert torch.allclose(a, b, atol=1e-6)


def test_flash_attn_front_end_cpu():
    torch = _torch()
    import torch_reference as TR
    from sdpa import flash_attn_interface as FA
    g = torch.Generator().manual_seed(1)
    b, s, h, hk, d = 2, 10, 4, 2, 16
    q = torch.randn(b, s, h, d, generator=g)
    k = torch.randn(b, s, hk, d, generator=g)
    v = torch.randn(b, s, hk, d, generator=g)
    ref, ref_lse = TR.attention(q, k, v, causal=True)
    out = FA.flash_attn_func(q, k, v, causal=True)
    assert (out.double() - ref).abs().max() < 1e-4
    out, lse, S = FA.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert lse.shape == (b, h, s) and (lse.double() - ref_lse).abs().max() < 1e-4
    assert S.shape == (b, h, s, s)
    # packed forms
    qkv = torch.stack([q, q, q], dim=2)
    r2, _ = TR.attention(q, q, q, window=(2, 0))
    assert (FA.flash_attn_qkvpacked_func(qkv, window_size=(2, 0)).double() - r2).abs().max() < 1e-4
    kv = torch.stack([k, v], dim=2)
    assert (FA.flash_attn_kvpacked_func(q, kv, causal=True).double() - ref).abs().max() < 1e-4
    # varlen
    lens = [3, 10, 6]
    cu = torch.tensor([0, 3, 13, 19], dtype=torch.int32)
    qv = torch.randn(19, h, d, generator=g)
    kvv = torch.randn(19, 2, hk, d, generator=g)
    o = FA.flash_attn_varlen_kvpacked_func(qv, kvv, cu, cu, max(lens), max(lens), causal=True)
    o2, lse2, S2 = FA.flash_attn_varlen_func(qv, kvv[:, 0], kvv[:, 1], cu, cu, 10, 10,
                                             causal=True, return_attn_probs=True)
    assert torch.equal(o, o2) and lse2.shape == (h, 19) and S2.shape == (3, h, 10, 10)
    for i in range(3):
        sl = slice(int(cu[i]), int(cu[i + 1]))
        r, _ = TR.attention(qv[None, sl], kvv[None, sl, 0], kvv[None, sl, 1], causal=True)
        assert (o[sl].double() - r[0]).abs().max() < 1e-4
    qkvv = torch.randn(19, 3, h, d, generator=g)
    o3 = FA.flash_attn_varlen_qkvpacked_func(qkvv, cu, max(lens))
    r, _ = TR.attention(qkvv[None, 3:13, 0], qkvv[None, 3:13, 1], qkvv[None, 3:13, 2])
    assert (o3[3:13].double() - r[0]).abs().max() < 1e-4
    # dropout: reproducible under torch.manual_seed, gradients flow
    qq = q.clone().requires_grad_()
    torch.manual_seed(7)
    a = FA.flash_attn_func(qq, k, v, dropout_p=0.2)
    torch.manual_seed(7)
    b_ = FA.flash_attn_func(qq, k, v, dropout_p=0.2)
    assert torch.equal(a, b_)
    a.sum().backward()
    assert torch.isfinite(qq.grad).all()


def test_flash_attn_with_kvcache_cpu():
    torch = _torch()
    import torch_reference as TR
    from sdpa.flash_attn_interface import flash_attn_with_kvcache
    g = torch.Generator().manual_seed(2)
    b, hk, h, d, sc = 2, 2, 4, 16, 32
    kc = torch.randn(b, sc, hk, d, generator=g)
    vc = torch.randn(b, sc, hk, d, generator=g)
    q = torch.randn(b, 1, h, d, generator=g)
    kn = torch.randn(b, 1, hk, d, generator=g)
    vn = torch.randn(b, 1, hk, d, generator=g)
    seqlens = torch.tensor([4, 20], dtype=torch.int32)
    kc0 = kc.clone()
    out, lse = flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=seqlens, causal=True,
                                       return_softmax_lse=True)
    assert lse.shape == (b, h, 1)
    for i in range(b):
        n = int(seqlens[i])
        assert torch.equal(kc[i, n], kn[i, 0]) and torch.equal(kc[i, :n], kc0[i, :n])
        r, _ = TR.attention(q[i:i + 1], kc[i:i + 1, :n + 1], vc[i:i + 1, :n + 1], causal=True)
        assert (out[i].double() - r[0]).abs().max() < 1e-4


def test_xformers_front_end_cpu():
    torch = _torch()
    import torch_reference as TR
    from sdpa import xformers_ops as xops
    g = torch.Generator().manual_seed(3)
    B, M, N, H, K = 2, 7, 12, 3, 16
    q = torch.randn(B, M, H, K, generator=g)
    k = torch.randn(B, N, H, K, generator=g)
    v = torch.randn(B, N, H, K, generator=g)
    cases = [
        (None, {}),
        (xops.LowerTriangularMask(), {"causal": True, "align": "top-left"}),
        (xops.LowerTriangularFromBottomRightMask(), {"causal": True}),
        (xops.LocalAttentionFromBottomRightMask(2, 1), {"window": (2, 1)}),
    ]
    for bias, m in cases:
        out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
        r, _ = TR.attention(q, k, v, **m)
        assert (out.double() - r).abs().max() < 1e-4, type(bias).__name__
        if bias is not None:  # materialize agrees with the mapping
            dense = bias.materialize((B, H, M, N))
            r2, _ = TR.attention(q, k, v, bias=dense)
            assert (out.double() - r2).abs().max() < 1e-4
    # tensor bias, broadcast, with gradient
    t = torch.randn(1, H, 1, N, generator=g, requires_grad=True)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=t.expand(B, H, M, N), scale=0.3)
    r, _ = TR.attention(q, k, v, bias=t.expand(B, H, M, N), scale=0.3)
    assert (out.double() - r).abs().max() < 1e-4
    (gt,) = torch.autograd.grad(out.sum(), [t])
    (rt,) = torch.autograd.grad(r.sum(), [t])
    assert (gt.double() - rt).abs().max() < 1e-4
    # causal + tensor bias
    t2 = torch.randn(B, H, M, N, generator=g)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask().add_bias(t2))
    r, _ = TR.attention(q, k, v, bias=t2, causal=True, align="top-left")
    assert (out.double() - r).abs().max() < 1e-4
    # block diagonal (varlen) and its causal forms
    ql, kl = [2, 5, 3], [4, 5, 6]
    bd = xops.BlockDiagonalMask.from_seqlens(ql, kl)
    qc = torch.randn(1, sum(ql), H, K, generator=g)
    kc = torch.randn(1, sum(kl), H, K, generator=g)
    vc = torch.randn(1, sum(kl), H, K, generator=g)
    for mask, m in [(bd, {}), (bd.make_causal(), {"causal": True, "align": "top-left"}),
                    (bd.make_causal_from_bottomright(), {"causal": True})]:
        out = xops.memory_efficient_attention(qc, kc, vc, attn_bias=mask)
        assert out.shape == (1, sum(ql), H, K)
        qs_, ks_ = bd.q_seqinfo.seqstart_py, bd.k_seqinfo.seqstart_py
        for i in range(3):
            r, _ = TR.attention(qc[:, qs_[i]:qs_[i + 1]], kc[:, ks_[i]:ks_[i + 1]],
                                vc[:, ks_[i]:ks_[i + 1]], **m)
            assert (out[:, qs_[i]:qs_[i + 1]].double() - r).abs().max() < 1e-4
        dense = mask.materialize((1, H, sum(ql), sum(kl)))
        r2, _ = TR.attention(qc, kc, vc, bias=dense)
        assert (out.double() - r2).abs().max() < 1e-4
    # [B, M, G, H, K] grouped form: k/v expanded over H
    G, Hg = 2, 2
    q5 = torch.randn(B, M, G, Hg, K, generator=g)
    k4 = torch.randn(B, N, G, 1, K, generator=g)
    v4 = torch.randn(B, N, G, 1, K, generator=g)
    out = xops.memory_efficient_attention(q5, k4.expand(B, N, G, Hg, K), v4.expand(B, N, G, Hg, K))
    assert out.shape == (B, M, G, Hg, K)
    r, _ = TR.attention(q5.reshape(B, M, G * Hg, K), k4[:, :, :, 0], v4[:, :, :, 0])
    assert (out.reshape(B, M, G * Hg, K).double() - r).abs().max() < 1e-4


def test_shims_resolve_to_sdpa():
    _torch()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([
        os.path.join(REPO, "python", "flash_attn_shim"), os.path.join(REPO, "python",
                                                                      "xformers_shim"),
        os.path.join(REPO, "python")]))
    code = ("import flash_attn, sdpa.flash_attn_interface as F; "
            "from flash_attn.flash_attn_interface import flash_attn_varlen_func; "
            "from flash_attn import flash_attn_func, flash_attn_with_kvcache; "
            "assert flash_attn_func is F.flash_attn_func; "
            "import xformers.ops as xops; from xformers.ops import fmha; "
            "from xformers.ops.fmha.attn_bias import BlockDiagonalMask, LowerTriangularMask; "
            "import sdpa.xformers_ops as X; "
            "assert xops.memory_efficient_attention is X.memory_efficient_attention; "
            "assert fmha.attn_bias.BlockDiagonalMask is X.BlockDiagonalMask; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_kvcache_custom_op_under_compile():
    torch = _torch()
    from sdpa import torch_ops
    if not torch_ops.HAVE_CUSTOM_OP:
        pytest.skip("no torch.library.custom_op")
    from sdpa.flash_attn_interface import flash_attn_with_kvcache
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 1, 2, 8, generator=g)
    kn, vn = torch.randn(2, 1, 1, 8, generator=g), torch.randn(2, 1, 1, 8, generator=g)
    seq = torch.tensor([3, 5], dtype=torch.int32)
    k0, v0 = torch.randn(2, 16, 1, 8, generator=g), torch.randn(2, 16, 1, 8, generator=g)

    def step(q, kc, vc, kn, vn, seq):
        return flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=seq, causal=True) * 2

    kc_e, vc_e = k0.clone(), v0.clone()
    eager = step(q, kc_e, vc_e, kn, vn, seq)
    kc_c, vc_c = k0.clone(), v0.clone()
    comp = torch.compile(step, backend="aot_eager", fullgraph=True)(q, kc_c, vc_c, kn, vn, seq)
    assert torch.equal(eager, comp)
    assert torch.equal(kc_e, kc_c) and torch.equal(vc_e, vc_c)
    assert torch.equal(kc_c[1, 5], kn[1, 0]) and torch.equal(kc_c[0, :3], k0[0, :3])
    # the raw path (no custom op) agrees
    kc_r, vc_r = k0.clone(), v0.clone()
    out_r, _ = torch_ops.kvcache_attention(q, kc_r, vc_r, seq, k_new=kn, v_new=vn, causal=True,
                                           use_custom_op=False)
    assert torch.equal(out_r * 2, eager)


def test_dlpack_object_is_read_without_copy():
    class Capsule:  # a foreign array: only the DLPack protocol
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    rng = np.random.default_rng(13)
    q = rnd(rng, (1, 6, 2, 16), np.float32)
    out = sdpa.forward(Capsule(q), Capsule(q), Capsule(q), causal=True)
    assert isinstance(out, np.ndarray)
    ref, _, _ = R.attention(q, q, q, causal=True)
    assert R.max_err(out, ref) < 1e-4
