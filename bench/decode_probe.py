"""Decoding probe: where sdpa's split-KV decode spends its time, cell by cell
(bench_decode.py's problem: bf16, 32/8 heads, d 128, s_q 1, contiguous cache,
GB/s of K/V read). For each cell b x L it prints sdpa's split count (read
back from the workspace size), eager and CUDA-graph GB/s at each split count
asked for (0 = the heuristic's), and with --torch the same for torch CUDNN.
--host times eager calls on a 16- and a 4096-token cache (one split, 32): the
host cost of one call, for sdpa (through sdpa.forward, and sdpa_fwd on a
descriptor built once: the library's own share) and torch CUDNN. --ws also times sdpa with a caller
workspace (no stream-ordered allocation), and without one (+pre: the descriptor built
once, the library's stream-ordered workspace). --profile lists the kernels of a
few eager calls with their device times and the gaps between them (torch
profiler). --once runs each cell's sdpa call a few times (with --torch, then torch
CUDNN's) and exits (for ncu: `ncu --csv ... python3 bench/decode_probe.py
--once --torch | python3 bench/ncu_table.py`).
--libs name=path,name=path,... compares builds of the library in one
process, cell by cell on the same tensors (before / after a kernel change):
each build's split count (the contiguous call's: a call on pages of 16 may
run another, see sdpa_decode_lean_splits), eager and graph GB/s of the
contiguous and paged caches (--pages: the page sizes, 16 unless given), of a
head-major cache (k / v [b, 8, L, 128] storage seen as [b, L, 8, 128]: each
kv head's rows contiguous) and, where the split count
is > 1, of the contiguous cache called as a dense problem with that count
forced (no cache_seqlens: what a length load costs), the largest output
difference from the first build's on the same layout where not 0, and torch
CUDNN on the contiguous and head-major storage. Its builds are timed one after
another, so their ratios move by up to 1% between runs; bench/decode_pair.py
times them in alternating rounds (about 0.1%).

  python3 bench/decode_probe.py [--cells 1x4096,8x16384] [--splits 0,8,16,32]
                                [--torch] [--host] [--ws] [--profile] [--once]
                                [--libs base=a/libsdpa.so,new=b/libsdpa.so] [--pages 16,256]
"""
import argparse
import ctypes
import json
import os
import tempfile
import time

import bench_decode as bd
from common import parse_libs, use_library
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import sdpa
from sdpa import _core, _lib
from sdpa import _tensors as T

H, H_K, D = bd.H, bd.H_K, bd.D


def split_count(q, k, v, seqlens, out):
    """The split count sdpa picks, from its workspace size (0 when unsplit)."""
    desc, keep, *_ = _core._build_fwd(q, k, v, cache_seqlens=seqlens, out=out)
    n = ctypes.c_size_t(0)
    _lib.check(_lib.lib().sdpa_fwd_workspace_size(ctypes.byref(desc), ctypes.byref(n)))
    per = q.shape[0] * q.shape[1] * H * (D * 4 + 4)
    return round(n.value / per) if n.value else 1


def prebuilt(q, k, v, seqlens, out, splits, workspace):
    """sdpa_fwd on a descriptor built once (the stream is re-read per call, so
    graph capture sees its own stream); with a caller workspace if asked."""
    desc, keep, *_ = _core._build_fwd(q, k, v, cache_seqlens=seqlens, out=out, num_splits=splits)
    ws = None
    if workspace:
        n = ctypes.c_size_t(0)
        _lib.check(_lib.lib().sdpa_fwd_workspace_size(ctypes.byref(desc), ctypes.byref(n)))
        ws = torch.empty(max(n.value, 1), device="cuda", dtype=torch.uint8)
        desc.workspace = ws.data_ptr()
        desc.workspace_size = n.value
    L = _lib.lib()

    dev = (T.CUDA, q.get_device())

    def run():  # the binding's own stream lookup (torch.cuda.current_stream() builds a Stream)
        desc.attn.stream = T.stream_of(dev)
        _lib.check(L.sdpa_fwd(ctypes.byref(desc)))
    run.keep = (keep, ws)
    return run


def profile_calls(name, fn, calls=4):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        evs = [e for e in json.load(f)["traceEvents"]
               if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and "dur" in e]
    evs.sort(key=lambda e: e["ts"])
    rows, prev_end = [], None
    for e in evs:
        gap = e["ts"] - prev_end if prev_end is not None else 0.0
        rows.append(f"{e['name'][:28]}:{e['dur']:.1f}us(gap {gap:.1f})")
        prev_end = e["ts"] + e["dur"]
    print(f"  profile {name}: " + " ".join(rows), flush=True)


def cell(b, L, splits, with_torch, once, with_ws=False, prof=False):
    torch.manual_seed(0)
    nbytes = 2 * b * L * H_K * D * 2
    q = torch.randn(b, 1, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)
    if once:
        for _ in range(3):
            sdpa.forward(q, k, v, cache_seqlens=seqlens, out=out)
        if with_torch:  # the same problem through torch CUDNN, for ncu side by side
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                for _ in range(3):
                    F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        torch.cuda.synchronize()
        return
    auto = split_count(q, k, v, seqlens, out)
    parts = []
    for s in splits:
        run = lambda s=s: sdpa.forward(q, k, v, cache_seqlens=seqlens, out=out, num_splits=s)
        e = bd.timed_gbps(run, nbytes, "sdpa")
        g = bd.timed_gbps(run, nbytes, "sdpa", graph=True)
        parts.append(f"s{s or 'auto'}={e or 0:.0f}/{g or 0:.0f}")
        if with_ws:
            run_pre = prebuilt(q, k, v, seqlens, out, s, False)
            e = bd.timed_gbps(run_pre, nbytes, "sdpa pre")
            g = bd.timed_gbps(run_pre, nbytes, "sdpa pre", graph=True)
            parts.append(f"s{s or 'auto'}+pre={e or 0:.0f}/{g or 0:.0f}")
            run_ws = prebuilt(q, k, v, seqlens, out, s, True)
            e = bd.timed_gbps(run_ws, nbytes, "sdpa ws")
            g = bd.timed_gbps(run_ws, nbytes, "sdpa ws", graph=True)
            parts.append(f"s{s or 'auto'}+ws={e or 0:.0f}/{g or 0:.0f}")
        if prof:
            profile_calls(f"b={b} L={L} s={s}", run)
    if with_torch:
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def run_t():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        e = bd.timed_gbps(run_t, nbytes, "cudnn")
        g = bd.timed_gbps(run_t, nbytes, "cudnn", graph=True)
        parts.append(f"cudnn={e or 0:.0f}/{g or 0:.0f}")
        if prof:
            profile_calls(f"cudnn b={b} L={L}", run_t)
    us = nbytes / 4.2e3 / 1e3
    print(f"b={b} L={L} auto_splits={auto} (GB/s eager/graph; {us:.1f} us at 4.2 TB/s): "
          + " ".join(parts), flush=True)


def ab_cell(b, L, libs, pages=(16,)):
    torch.manual_seed(0)
    nbytes = 2 * b * L * H_K * D * 2
    q = torch.randn(b, 1, H, D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)
    k = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    kh = k.transpose(1, 2).contiguous()  # [b, 8, L, 128] storage
    vh = v.transpose(1, 2).contiguous()
    layouts = {"contig": (k, v, None)}
    for pg in pages:
        layouts[f"page{pg}"] = bd.paged_cache(b, L, pg)
    layouts["headmaj"] = (kh.transpose(1, 2), vh.transpose(1, 2), None)
    refs, parts = {}, []
    for name, path in libs:
        use_library(path)
        ns = split_count(q, k, v, seqlens, out)
        parts.append(f"{name}:splits={ns}")
        # "noseq": the contiguous cache as a dense problem with the same forced
        # split count (no cache_seqlens load); only where the count is > 1
        # (a forced count of 1 is the plain forward's)
        lays = dict(layouts, **({"noseq": (k, v, "noseq")} if ns > 1 else {}))
        for lay, (kk, vv, tab) in lays.items():
            if tab == "noseq":
                run = lambda ns=ns: sdpa.forward(q, k, v, num_splits=ns, out=out)
            else:
                run = lambda kk=kk, vv=vv, tab=tab: sdpa.forward(q, kk, vv, cache_seqlens=seqlens,
                                                                 block_table=tab, out=out)
            e = bd.timed_gbps(run, nbytes, f"{name} {lay}")
            g = bd.timed_gbps(run, nbytes, f"{name} {lay}", graph=True)
            run()
            ref = refs.setdefault(lay, out.clone())  # the first build's output, per layout
            diff = (out.float() - ref.float()).abs().max().item()
            parts.append(f"{name}/{lay}={e or 0:.0f}/{g or 0:.0f}" + (f"(diff {diff:.1e})" if diff else ""))
    qt = q.transpose(1, 2)
    for lay, (kt, vt) in (("contig", (k.transpose(1, 2), v.transpose(1, 2))), ("headmaj", (kh, vh))):
        def run_t(kt=kt, vt=vt):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        e = bd.timed_gbps(run_t, nbytes, "cudnn")
        g = bd.timed_gbps(run_t, nbytes, "cudnn", graph=True)
        parts.append(f"cudnn/{lay}={e or 0:.0f}/{g or 0:.0f}")
    print(f"b={b} L={L} (GB/s eager/graph): " + " ".join(parts), flush=True)


def host_cost():
    """At L = 16 (one split: no workspace) and L = 4096 (32 splits: a workspace)."""
    for L in (16, 4096):
        host_cost_at(1, L)


def host_cost_at(b, L):
    q = torch.randn(b, 1, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def run_t():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    for name, fn in (("sdpa.forward", lambda: sdpa.forward(q, k, v, cache_seqlens=seqlens, out=out)),
                     ("sdpa_fwd, descriptor built once", prebuilt(q, k, v, seqlens, out, 0, False)),
                     ("cudnn", run_t)):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"host cost per call ({name}, b={b} L={L}, eager): {(t1 - t0) / n * 1e6:.1f} us",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="1x4096,1x16384,1x131072,8x4096,8x16384")
    ap.add_argument("--splits", default="0")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--host", action="store_true")
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--ws", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--libs", default="")
    ap.add_argument("--pages", default="16", help="with --libs: the page sizes timed")
    args = ap.parse_args()
    if args.libs:
        libs = parse_libs(args.libs)
        for c in args.cells.split(","):
            ab_cell(*(int(x) for x in c.split("x")), libs, [int(x) for x in args.pages.split(",")])
        return
    splits = [int(x) for x in args.splits.split(",")]
    if args.host:
        host_cost()
    for c in args.cells.split(","):
        b, L = (int(x) for x in c.split("x"))
        cell(b, L, splits, args.torch, args.once, args.ws, args.profile)


if __name__ == "__main__":
    main()
