"""GPU benchmark: sdpa against torch SDPA's FLASH, CUDNN and EFFICIENT backends
in one process, on the same inputs (docs/design.md §8).

Grid: bf16, d in {64, 128, 256} (--dims: others), s in {512 .. 16k} with
b*s = 16k and h = 2048 // d, causal on and off. FLOPs: forward 4*b*h*s_q*s_k*d (halved when
causal); backward 2.5x that. Writes bench/results/<date>-<gpu>-<op>.json, a file an op
(schema of docs/design.md §8), and a markdown table beside each, and prints the tables.

  python3 bench/bench.py [--ops fwd,bwd] [--quick] [--dims 64,96,128,192,256]
  python3 bench/bench.py --dropout P   the cost of dropout (suffix -dropout)
  python3 bench/bench.py --bias        a full [b, h, s, s] bf16 bias: ops fwd_bias and
                                       bwd_bias (dq, dk, dv and dbias), suffix -bias,
                                       against torch's EFFICIENT and CUDNN with it as
                                       attn_mask (requires_grad for bwd_bias)
  python3 bench/bench.py --f32         fp32 q, k, v: ops fwd_f32 and bwd_f32, suffix
                                       -f32, against torch's EFFICIENT in fp32
  python3 bench/bench.py --f32-bias    fp32 with a full bias: ops fwd_bias_f32, bwd_bias_f32,
                                       suffix -f32_bias, against torch EFFICIENT, checked
  python3 bench/bench.py --hdim        head dims 40 .. 512 off the buckets: ops fwd_hdim,
                                       bwd_hdim, suffix -hdim, against EFFICIENT, FLASH,
                                       CUDNN and sdpa at the bucket the d pads to
  python3 bench/bench.py --mla         d_qk 192, d_v 128: ops fwd_mla, bwd_mla, suffix
                                       -mla, against EFFICIENT, CUDNN and sdpa at 192 / 192
  (--ops fwd or --ops bwd picks one op of these modes; s in {1024, 4096} for --bias, --f32)

The --bias and --f32 modes check what they time: sdpa's outputs (NaN-poisoned
first) must be finite and agree with torch EFFICIENT's on the cell's first call
(max|diff| / max|EFFICIENT| within TOLERANCE); each record keeps
max_abs_diff_vs_efficient (per output), rel_diff_vs_efficient and check, and the
run exits 1 if any cell failed. Their markdown table is rewritten with the JSON
after every cell (bench/common.py <json> re-renders it).

fp32: torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
are set False (recorded in the results file). Nothing on the timed path reads
them: torch EFFICIENT's fp32 kernels on sm80+ run CUTLASS's 3xTF32
(OpMultiplyAddFastF32) on the tensor cores, fp32-accurate, whatever they say.
"""
import argparse
import math
import sys
import time

from common import cuda_time_ms, flops, render_markdown, write_results

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import sdpa

TORCH_BACKENDS = {"torch_flash": SDPBackend.FLASH_ATTENTION,
                  "torch_cudnn": SDPBackend.CUDNN_ATTENTION,
                  "torch_efficient": SDPBackend.EFFICIENT_ATTENTION}


def tflops(fl, fn, label, timer=cuda_time_ms):
    """TFLOP/s of fn, or None (the reason on stderr) where it raises: a backend that
    cannot run this problem."""
    try:
        ms = timer(fn)
        return fl / (ms * 1e-3) / 1e12
    except Exception as e:
        print(f"  ({label}: {type(e).__name__}: {str(e)[:160]})", file=sys.stderr)
        return None


def scaled_time_ms(fn):
    """cuda_time_ms with fewer calls for a slow fn: the fp32 and dbias cells may run
    on the SIMT kernels at 0.1-1 s a call, where 3 + 7 x 10 calls would take minutes
    a cell. Calls under 10 ms get the usual 10 reps x 7 trials."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one_ms = (time.perf_counter() - t0) * 1e3
    reps = max(1, min(10, int(100.0 / max(one_ms, 1e-3))))
    return cuda_time_ms(fn, warmup=1, reps=reps, trials=7 if one_ms < 50 else 3)


def sdpa_tflops(op, q, k, v, causal, label, dropout=0.0, dout=None):
    """TFLOP/s of sdpa's forward (op "fwd...", with dropout p) or backward ("bwd...", of
    dout, random by default) on q, k, v ([b, s, h, d], v's d may differ)."""
    b, s, h, d = q.shape
    fl = flops(op, b, h, s, k.shape[1], d, causal, v.shape[-1])
    if op.startswith("fwd"):
        out = torch.empty(b, s, h, v.shape[-1], device=q.device, dtype=q.dtype)
        return tflops(fl, lambda: sdpa.forward(q, k, v, causal=causal, dropout_p=dropout, seed=1,
                                               out=out), label)
    out, lse = sdpa.forward(q, k, v, causal=causal, return_lse=True)
    dout = torch.randn_like(out) if dout is None else dout
    return tflops(fl, lambda: sdpa.backward(dout, q, k, v, out, lse, causal=causal), label)


def bench_one(op, b, s, h, d, causal, dropout=0.0):
    torch.manual_seed(0)
    # sdpa's layout is [b, s, h, d]; torch takes [b, h, s, d]: the same storage, transposed views.
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=op == "bwd")
    k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=op == "bwd")
    v = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=op == "bwd")
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    rec = {"op": op, "dtype": "bf16", "b": b, "s_q": s, "s_k": s, "h": h, "h_k": h, "d": d,
           "causal": causal, "paged": 0, "dropout": dropout}
    fl = flops(op, b, h, s, s, d, causal)
    label = f"{op} b={b} s={s} d={d} causal={causal}"
    dout = torch.randn_like(q) if op == "bwd" else None
    rec["sdpa"] = sdpa_tflops(op, q, k, v, causal, label, dropout, dout)
    if op == "fwd":
        for name, be in TORCH_BACKENDS.items():
            def run(be=be):
                with sdpa_kernel(be):
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, dropout_p=dropout)
            rec[name] = tflops(fl, run, label)
    else:
        for name, be in TORCH_BACKENDS.items():
            try:
                with sdpa_kernel(be):
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            except Exception:
                rec[name] = None
                continue
            do = dout.transpose(1, 2)
            rec[name] = tflops(fl, lambda o=o, do=do: torch.autograd.grad(o, (qt, kt, vt), do,
                                                                            retain_graph=True),
                               label)
    return rec


DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}

# The largest max|sdpa - torch EFFICIENT| / max|torch EFFICIENT| a checked cell allows in any
# output. Loose: two kernels round P, dS and the outputs differently (bf16 keeps 8 bits),
# while a wrong result (a bias or dbias tile missing, a tile left unwritten) lands near 1.
TOLERANCE = {"bf16": 5e-2, "f32": 5e-3}


def finite_or_none(x):
    return None if x is None or math.isnan(x) else x


def max_abs(x, ref=None):
    """max|x - ref| (max|x| without ref) in fp32; NaN if an element is not finite. One
    slice of dim 0 at a time: a [4, 32, 4096, 4096] bias gradient whole would take 8 GiB
    of fp32 temporaries."""
    m = 0.0
    for i in range(x.shape[0]):
        a = x[i].float()
        if ref is not None:
            a = a - ref[i].float()
        if not bool(torch.isfinite(a).all()):
            return float("nan")
        m = max(m, float(a.abs().max()))
    return m


def compare(outs, refs):
    """{name: max|outs[name] - refs[name]|} and the largest max|out - ref| / max|ref|
    over the names (NaN if anything is not finite)."""
    diffs, rels = {}, []
    for n, ref in refs.items():
        diffs[n] = max_abs(outs[n], ref)
        scale = max_abs(ref)
        rels.append(diffs[n] / scale if scale > 0 else diffs[n])
    return diffs, (float("nan") if any(math.isnan(r) for r in rels) else max(rels))


def selected_kernel(q, k, v, kw):
    """The kernel row sdpa.explain says the problem gets (its first line: "selected: <name>")."""
    try:
        first = sdpa.explain(q, k, v, **kw).splitlines()[0]
    except Exception as e:
        return f"explain failed: {type(e).__name__}: {str(e)[:80]}"
    return first.split(": ", 1)[1] if first.startswith("selected: ") else first


def bench_checked(op, b, s, h, d, causal, dtype, bias, bshape=None, dv=None, name=None,
                  backends=None):
    """One cell of the --bias / --f32 modes: op "fwd" or "bwd", recorded as fwd_bias,
    bwd_bias, fwd_f32 or bwd_f32; bwd_bias asks sdpa for dbias and torch for the
    gradient of its attn_mask. First one call each, compared; then the timing.
    sdpa's outputs are NaN-poisoned before its first call, must come back finite and
    agree with torch EFFICIENT's (the reference). torch CUDNN's (bias only) are checked
    against EFFICIENT's too: a CUDNN that disagrees (e.g. one that leaves the bias
    gradient out) is recorded None with a note, not timed. bshape: the bias's shape
    (default [b, h, s, s]); a broadcast one is recorded as dbias_bcast, its dbias summed.
    dv: v's head dim (default d); name: the record's op; backends: the torch backends
    run (EFFICIENT first: the reference, or where it does not run the first that does;
    every other one checked against it)."""
    torch.manual_seed(0)
    dt = DTYPES[dtype]
    bwd = op == "bwd"
    dv = dv or d
    name = name or (f"{op}_bias" if bias else f"{op}_{dtype}")
    backends = backends or (("torch_efficient", "torch_cudnn") if bias else ("torch_efficient",))
    if bshape:  # --dbias-bcast: the broadcast biases and their full-bias reference
        name = "dbias_bcast" if tuple(bshape) != (b, h, s, s) else "dbias_full"
    bshape = tuple(bshape or (b, h, s, s))
    # sdpa's layout is [b, s, h, d]; torch takes [b, h, s, d]: the same storage, transposed views.
    q, k, v = (torch.randn(b, s, h, dd, device="cuda", dtype=dt, requires_grad=bwd)
               for dd in (d, d, dv))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    dout = torch.randn(b, s, h, dv, device="cuda", dtype=dt)
    rec = {"op": name, "dtype": dtype, "b": b, "s_q": s, "s_k": s, "h": h, "h_k": h, "d": d,
           "d_v": dv, "causal": causal, "paged": 0, "dropout": 0.0}
    for bname in TORCH_BACKENDS:  # the ones not run (FLASH: no attn_mask, fp32 or d_v != d)
        rec[bname] = None
    fl = flops(op, b, h, s, s, d, causal, dv)
    label = f"{name} b={b} s={s} d={d} causal={int(causal)}"
    tol = TOLERANCE[dtype]
    kw, torch_kw = {"causal": causal}, {"is_causal": causal}
    if bias:
        bt = torch.randn(*bshape, device="cuda", dtype=dt)
        rec["bias_shape"] = "x".join(map(str, bshape))
        kw["bias"] = bt
        # torch takes no attn_mask with is_causal: the causal -inf goes into its copy, made a
        # leaf of its own so that torch's backward has no masked_fill to go back through
        mask = bt
        if causal:
            tri = torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1)
            mask = bt.masked_fill(tri, float("-inf"))
        torch_kw = {"attn_mask": mask.detach().requires_grad_(bwd)}
    problems = []

    # ---- sdpa's first call, outputs poisoned
    nan = float("nan")
    run_sdpa = None
    with torch.no_grad():  # sdpa.forward of tensors that require grad would go through autograd
        try:
            if bwd:
                o_s, lse = sdpa.forward(q, k, v, return_lse=True, **kw)
                outs = {n: torch.full_like(x, nan) for n, x in (("dq", q), ("dk", k), ("dv", v))}
                if bias:
                    outs["dbias"] = torch.full_like(bt, nan)
                call = dict(kw, dq=outs["dq"], dk=outs["dk"], dv=outs["dv"],
                            dbias=outs.get("dbias", False))
                rec["sdpa_kernel"] = selected_kernel(q, k, v, dict(kw, backward=True,
                                                                   dbias=call["dbias"]))
                run = lambda: sdpa.backward(dout, q, k, v, o_s, lse, **call)  # noqa: E731
            else:
                outs = {"out": torch.full_like(v, nan)}  # [b, s, h, d_v]
                rec["sdpa_kernel"] = selected_kernel(q, k, v, kw)
                run = lambda: sdpa.forward(q, k, v, out=outs["out"], **kw)  # noqa: E731
            run()
            torch.cuda.synchronize()
            run_sdpa = run
        except Exception as e:
            problems.append(f"sdpa raised {type(e).__name__}: {str(e)[:160]}")
            rec["sdpa"] = None

    # ---- torch's first calls: EFFICIENT is the reference
    def first_torch(be):
        """One call of a torch backend: (its outputs under sdpa's names and layouts, the call to time)."""
        with sdpa_kernel(be):
            o = F.scaled_dot_product_attention(qt, kt, vt, **torch_kw)
        if not bwd:
            def fwd_call():
                with sdpa_kernel(be):
                    F.scaled_dot_product_attention(qt, kt, vt, **torch_kw)
            return {"out": o.transpose(1, 2)}, fwd_call
        wrt = (qt, kt, vt) + ((torch_kw["attn_mask"],) if bias else ())
        do = dout.transpose(1, 2)

        def bwd_call():
            return torch.autograd.grad(o, wrt, do, retain_graph=True)
        g = bwd_call()
        res = {n: x.transpose(1, 2) for n, x in zip(("dq", "dk", "dv"), g)}
        if bias:
            res["dbias"] = g[3]
        return res, bwd_call

    refs, ref_name, timed = None, None, {}
    for bname in backends:
        try:
            res, fn = first_torch(TORCH_BACKENDS[bname])
            torch.cuda.synchronize()
        except Exception as e:  # a backend that cannot run this problem
            print(f"  ({label} {bname}: {type(e).__name__}: {str(e)[:160]})", file=sys.stderr)
            rec[bname] = None
            continue
        if bname == "torch_efficient" or refs is None:  # EFFICIENT, else the first that ran
            refs, ref_name = res, bname
        else:
            _, rel = compare(res, refs)
            rec[f"rel_diff_{bname[6:]}_vs_{ref_name[6:]}"] = finite_or_none(rel)
            if not rel <= tol:
                rec[bname] = None
                rec[bname + "_note"] = (f"not timed: its outputs disagree with {ref_name}'s "
                                        f"(max|diff| / max|reference| = {rel:.3g})")
                print(f"  ({label} {bname}: {rec[bname + '_note']})", file=sys.stderr)
                continue
        timed[bname] = fn

    # ---- the checks
    if run_sdpa is not None:
        bad = [n for n, x in outs.items() if math.isnan(max_abs(x))]
        if bad:
            problems.append("sdpa's " + ", ".join(bad) + " not finite after its first call "
                            "(poisoned with NaN before it)")
        if refs is not None:
            diffs, rel = compare(outs, refs)
            rec[f"max_abs_diff_vs_{ref_name[6:]}"] = {n: finite_or_none(x) for n, x in diffs.items()}
            rec[f"rel_diff_vs_{ref_name[6:]}"] = finite_or_none(rel)
            if not rel <= tol:
                problems.append(f"max|sdpa - {ref_name}| / max|{ref_name}| = {rel:.3g} "
                                f"> {tol} (" + ", ".join(f"{n} {x:.3g}" for n, x in diffs.items())
                                + ")")
    checked = refs is not None
    refs = res = None  # the first calls' outputs: free before the timing

    # ---- timing
    if run_sdpa is not None:
        rec["sdpa"] = tflops(fl, run_sdpa, f"{label} sdpa", scaled_time_ms)
        if rec["sdpa"] is None:
            problems.append("sdpa raised while timed")
    for bname, fn in timed.items():
        rec[bname] = tflops(fl, fn, f"{label} {bname}", scaled_time_ms)
    if problems:
        rec["check"] = "FAIL: " + "; ".join(problems)
    else:
        rec["check"] = ("unchecked: no torch backend ran" if not checked else "ok"
                        if ref_name == "torch_efficient" else f"ok (against {ref_name}: "
                        f"torch EFFICIENT did not run)")
    return rec


def run_checked(gpu, ops, bias, f32):
    """The --bias (bf16), --f32 or --f32-bias (both) mode: ops x d {64, 128, 256} x causal x
    s {1024, 4096} (--f32-bias: d {64, 128}, s {1024, 2048, 4096}, ops fwd_bias_f32 /
    bwd_bias_f32), b*s = 16k, h*d = 2048; one results file (suffix -bias / -f32 /
    -f32_bias) and its markdown rewritten after every cell. Exits 1 if any cell failed its
    check."""
    dtype = "f32" if f32 else "bf16"
    suffix = "-f32_bias" if bias and f32 else "-bias" if bias else "-f32"
    others = ["torch_efficient", "torch_cudnn"] if bias and not f32 else ["torch_efficient"]
    dims, seqs = ((64, 128), (1024, 2048, 4096)) if bias and f32 else ((64, 128, 256), (1024, 4096))
    if f32:
        # no TF32 in torch's own fp32 math (none of it is timed: EFFICIENT's fp32 kernels run
        # 3xTF32 whatever these say); recorded in the results file
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    cols = (["op", "d", "causal", "s_q", "b", "h", "sdpa"] + others +
            ["x_" + n.split("_", 1)[1] for n in others] +
            ["rel_diff_vs_efficient", "check", "sdpa_kernel"])
    what = ("fp32, full [b, h, s, s] bias, bwd_bias_f32 with dbias; torch EFFICIENT runs 3xTF32"
            if bias and f32 else "bf16, full [b, h, s, s] bias, bwd_bias with dbias" if bias else
            "fp32; torch EFFICIENT runs 3xTF32 on the tensor cores")
    extra = {"torch": torch.__version__,
             "allow_tf32": {"cuda_matmul": torch.backends.cuda.matmul.allow_tf32,
                            "cudnn": torch.backends.cudnn.allow_tf32},
             "tolerance": TOLERANCE[dtype],
             "columns": cols, "ratio_of": others,
             "title": f"TFLOP/s ({what}), x_* = sdpa / torch backend; rel_diff = "
                      f"max|sdpa - EFFICIENT| / max|EFFICIENT| over the outputs of the first call"}
    records, failed = [], []
    for op in ops:
        for d in dims:
            for causal in (False, True):
                for s in seqs:
                    rec = bench_checked(op, 16384 // s, s, 2048 // d, d, causal, dtype, bias,
                                        name=f"{op}_bias_f32" if bias and f32 else None,
                                        backends=others)
                    records.append(rec)
                    # rewritten after every cell: a run cut short keeps what it measured
                    path = write_results(gpu, records, suffix=suffix, extra=extra)
                    table = render_markdown(path)
                    cell = f"{rec['op']} d={d} causal={int(causal)} s={s}"
                    if rec["check"].startswith("FAIL"):
                        failed.append(f"{cell}: {rec['check']}")
                    rel = rec.get("rel_diff_vs_efficient")
                    print(f"{cell}: " + ", ".join(
                        f"{n}=" + ("-" if rec.get(n) is None else f"{rec[n]:.1f}")
                        for n in ["sdpa"] + others) +
                        f", rel_diff {'-' if rel is None else f'{rel:.1e}'}, {rec['check']}",
                        flush=True)
    print(table)
    print("wrote", path)
    if failed:
        print(f"{len(failed)} cell(s) FAILED their check:", *failed, sep="\n  ")
        sys.exit(1)


def run_dbias_bcast(gpu):
    """--dbias-bcast: bf16 d 128, s 2048 (b 8, h 16), causal and not: the backward with
    dbias of a full [b, h, s, s] bias and of [1, h, s, s] and [b, 1, s, s] ones (dbias
    summed over the broadcast dim), each against torch EFFICIENT with the same bias."""
    b, s, h, d = 8, 2048, 16, 128
    extra = {"torch": torch.__version__, "tolerance": TOLERANCE["bf16"],
             "title": "TFLOP/s of the backward with dbias; t / t_full = the call's time over "
                      "the full-bias backward's in the same row group"}
    records, failed = [], []
    for causal in (False, True):
        full = None
        for shape in ((b, h, s, s), (1, h, s, s), (b, 1, s, s)):
            rec = bench_checked("bwd", b, s, h, d, causal, "bf16", True, shape)
            full = full or rec.get("sdpa")
            if rec.get("sdpa") and full:
                rec["t_over_full"] = round(full / rec["sdpa"], 2)
            records.append(rec)
            write_results(gpu, records, suffix="-dbias_bcast", extra=extra)
            if rec["check"].startswith("FAIL"):
                failed.append(f"{shape} causal={causal}: {rec['check']}")
            print(f"bias {list(shape)} causal={int(causal)}: sdpa={rec.get('sdpa') or 0:.1f} "
                  f"efficient={rec.get('torch_efficient') or 0:.1f} t/t_full="
                  f"{rec.get('t_over_full') or 0:.2f} kernel={rec.get('sdpa_kernel')} "
                  f"{rec['check']}", flush=True)
    if failed:
        print(f"{len(failed)} cell(s) FAILED their check:", *failed, sep="\n  ")
        sys.exit(1)


# --hdim: the head dims off the bench grid's buckets; each against the bucket it pads to
# (d 100: contiguous rows of 200 bytes, not 16-byte aligned: the staged rows)
HDIMS = (40, 72, 80, 96, 100, 112, 160, 192, 320, 512)
BUCKETS = (64, 96, 128, 192, 256, 320, 384, 512)


def sdpa_only(op, b, s, h, d, causal):
    """TFLOP/s of sdpa alone at d = d_v (no check: the --hdim / --mla cells' own-bucket
    reference)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    return sdpa_tflops(op, q, k, v, causal, f"{op} d={d}")


def run_shapes(gpu, mode, ops, hdims=HDIMS):
    """--hdim: fwd_hdim / bwd_hdim over HDIMS, s 4096, b 4, h 16, causal or not, against
    torch EFFICIENT, FLASH and CUDNN (where they run), and sdpa at the bucket the head dim
    pads to (sdpa_bucket, d_bucket). --mla: fwd_mla / bwd_mla at d_qk 192, d_v 128, h 16,
    b s = 16k, s 2k-16k, against EFFICIENT and CUDNN (FLASH takes no d_v != d), and sdpa
    at d 192 / 192 (sdpa_d192). bf16; every cell checked as --bias's are."""
    suffix = "-" + mode
    others = ["torch_efficient", "torch_flash", "torch_cudnn"]
    own = "sdpa_bucket" if mode == "hdim" else "sdpa_d192"
    cols = (["op", "d", "d_v", "causal", "s_q", "b", "h", "sdpa", own] + others +
            ["x_" + n.split("_", 1)[1] for n in others] + ["check", "sdpa_kernel"])
    extra = {"torch": torch.__version__, "tolerance": TOLERANCE["bf16"], "columns": cols,
             "ratio_of": others,
             "title": f"TFLOP/s (bf16; FLOPs 2 b h s^2 (d + d_v), halved when causal, x2.5 "
                      f"backward), x_* = sdpa / torch backend, {own}: sdpa at "
                      + ("the bucket d pads to" if mode == "hdim" else "d = d_v = 192")}
    if mode == "hdim":
        cells = [(d, d, 4096, 4) for d in hdims]
    else:
        cells = [(192, 128, s, 16384 // s) for s in (2048, 4096, 8192, 16384)]
    records, failed = [], []
    for op in ops:
        for d, dv, s, b in cells:
            for causal in (False, True):
                rec = bench_checked(op, b, s, 16, d, causal, "bf16", False, dv=dv,
                                    name=f"{op}_{mode}", backends=others)
                if mode == "hdim":
                    bucket = next((x for x in BUCKETS if x >= d), None)
                    if bucket and bucket != d:
                        rec["d_bucket"] = bucket
                        rec[own] = sdpa_only(op, b, s, 16, bucket, causal)
                else:
                    rec[own] = sdpa_only(op, b, s, 16, 192, causal)
                records.append(rec)
                write_results(gpu, records, suffix=suffix, extra=extra)
                if rec["check"].startswith("FAIL"):
                    failed.append(f"{op} d={d}/{dv} s={s} causal={causal}: {rec['check']}")
                print(f"{op}_{mode} d={d}/{dv} s={s} causal={int(causal)}: " + ", ".join(
                    f"{n}={rec.get(n) or 0:.0f}" for n in ("sdpa", own, *others)) +
                    f" kernel={rec.get('sdpa_kernel')} {rec['check']}", flush=True)
    if failed:
        print(f"{len(failed)} cell(s) FAILED their check:", *failed, sep="\n  ")
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default=None,
                    help="fwd, bwd or fwd,bwd (default fwd; fwd,bwd with --bias or --f32)")
    ap.add_argument("--quick", action="store_true", help="s in {1024, 4096} only")
    ap.add_argument("--dims", default="64,128,256",
                    help="the grid's head dims (comma-separated; the Hopper issues' grid is "
                         "64,96,128,192,256)")
    ap.add_argument("--hdims", default=None,
                    help="--hdim: these head dims (comma-separated) instead of "
                         + ",".join(map(str, HDIMS)))
    mode = ap.add_mutually_exclusive_group()  # one mode a run (one results file each)
    mode.add_argument("--dropout", type=float, default=0.0,
                      help="forward only: time these cells at p = 0 and at this p (the cost of dropout)")
    for flag, what in (
            ("--bias", "a full bf16 bias: fwd_bias, bwd_bias (with dbias), s in {1024, 4096}"),
            ("--f32", "fp32: fwd_f32, bwd_f32 against torch EFFICIENT, s in {1024, 4096}"),
            ("--f32-bias", "fp32 with a full bias: fwd_bias_f32, bwd_bias_f32 against torch "
                           "EFFICIENT"),
            ("--dbias-bcast", "the backward with dbias of broadcast biases against the full one"),
            ("--hdim", "fwd_hdim / bwd_hdim: head dims off the grid's buckets, checked"),
            ("--mla", "fwd_mla / bwd_mla: d_qk 192, d_v 128, s 2k-16k, checked")):
        mode.add_argument(flag, action="store_true", help=what)
    args = ap.parse_args()
    both = args.bias or args.f32 or args.f32_bias or args.hdim or args.mla
    ops = (args.ops or ("fwd,bwd" if both else "fwd")).split(",")
    if any(op not in ("fwd", "bwd") for op in ops):
        ap.error(f"--ops {args.ops}: expected fwd, bwd or fwd,bwd")
    gpu = torch.cuda.get_device_name()
    if args.hdim or args.mla:
        hdims = tuple(int(x) for x in args.hdims.split(",")) if args.hdims else HDIMS
        run_shapes(gpu, "hdim" if args.hdim else "mla", ops, hdims)
        return
    if args.dbias_bcast:
        run_dbias_bcast(gpu)
        return
    seqs = [1024, 4096] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    records = []
    if args.dropout > 0:
        for d in (64, 128, 256):
            for causal in (False, True):
                pair = [bench_one("fwd", 4, 4096, 2048 // d, d, causal, p) for p in (0.0, args.dropout)]
                records.extend(pair)
                write_results(gpu, records, suffix="-dropout")
                print(f"dropout d={d} causal={int(causal)}: sdpa p=0 {pair[0]['sdpa']:.0f}, "
                      f"p={args.dropout} {pair[1]['sdpa']:.0f} ({pair[1]['sdpa'] / pair[0]['sdpa']:.2f}x); "
                      f"torch_flash {pair[0]['torch_flash'] or 0:.0f} -> {pair[1]['torch_flash'] or 0:.0f}",
                      flush=True)
        return
    if args.bias or args.f32 or args.f32_bias:
        run_checked(gpu, ops, bias=args.bias or args.f32_bias, f32=args.f32 or args.f32_bias)
        return
    dims = [int(x) for x in args.dims.split(",")]
    if any(d <= 0 or d > 2048 for d in dims):
        ap.error(f"--dims {args.dims}: expected head dims in 1 .. 2048 (h = 2048 // d)")
    # a file an op (<date>-<gpu>-fwd.json, -bwd.json), so a run of one op keeps the other's
    for op in ops:
        records = []
        for d in dims:
            for causal in (False, True):
                for s in seqs:
                    b, h = 16384 // s, 2048 // d
                    rec = bench_one(op, b, s, h, d, causal)
                    records.append(rec)
                    # rewritten after every cell: a run cut short keeps what it measured
                    write_results(gpu, records, suffix=f"-{op}")
                    print(f"{op} d={d} causal={int(causal)} s={s}: " + ", ".join(
                        f"{n}={rec.get(n) or 0:.0f}" for n in ("sdpa", *TORCH_BACKENDS)), flush=True)
        path = write_results(gpu, records, suffix=f"-{op}")
        print(render_markdown(path))
        print("wrote", path)


if __name__ == "__main__":
    main()
