"""Decoding benchmark: sdpa's split-KV KV-cache forward against torch SDPA's
FLASH and CUDNN backends on the same contiguous problem (docs/design.md §8).

Problem: bf16, GQA 32 query heads / 8 kv heads, d = 128, one new query per
sequence (s_q = 1), every sequence with a full cache of L tokens; batch in
{1, 8, 32, 64}, L in {4k, 16k, 64k, 128k}. sdpa runs the cache contiguous
[b, L, 8, 128] and paged (page 16 and 256, shuffled block tables); torch runs
q [b, 32, 1, 128] against k / v [b, 8, L, 128] (the same storage as sdpa's
contiguous cache, transposed views) with enable_gqa=True, so it reads each
kv head once too. Unit: GB/s of K/V read (2 * b * L * h_k * d * 2 bytes over
the time), against the card's ~4.2 TB/s copy bandwidth. The schema's fields
time eager back-to-back calls (host cost included, as a model loop sees it);
the *_graph fields time CUDA-graph replays of one call (device time only). Writes
bench/results/<date>-<gpu>-decode.json (op "decode"; torch fields null for
the paged rows) and a markdown table beside it.

  python3 bench/bench_decode.py [--quick] [--batches 1,8,32,64] [--lens 4096,16384,65536,131072]
"""
import argparse
import sys

from common import capture_graph, cuda_time_ms, markdown_table, write_results

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import sdpa

H, H_K, D = 32, 8, 128
TORCH_BACKENDS = {"torch_flash": SDPBackend.FLASH_ATTENTION,
                  "torch_cudnn": SDPBackend.CUDNN_ATTENTION}


def timed_gbps(fn, nbytes, label, graph=False):
    """GB/s of K/V read; enough back-to-back calls per trial to last ~20 ms.
    graph=True captures one call in a CUDA graph and times its replays: the
    device time alone, without the host cost of the call (which bounds small
    problems through the ctypes binding)."""
    est_ms = nbytes / 3.0e9
    reps = max(2, min(50, int(20.0 / max(est_ms, 1e-3))))
    try:
        if graph:
            fn()
            torch.cuda.synchronize()
            g = capture_graph(fn)
            ms = cuda_time_ms(g.replay, warmup=2, reps=reps, trials=5)
        else:
            ms = cuda_time_ms(fn, warmup=2, reps=reps, trials=5)
    except Exception as e:  # a backend that cannot run this problem
        print(f"  ({label}{' graph' if graph else ''}: {type(e).__name__}: {str(e)[:160]})",
              file=sys.stderr)
        return None
    return nbytes / (ms * 1e-3) / 1e9


def paged_cache(b, L, page):
    nblocks = b * L // page
    kp = torch.randn(nblocks, page, H_K, D, device="cuda", dtype=torch.bfloat16)
    vp = torch.randn(nblocks, page, H_K, D, device="cuda", dtype=torch.bfloat16)
    bt = torch.randperm(nblocks, device="cuda", dtype=torch.int64).to(torch.int32).view(b, L // page)
    return kp, vp, bt


def bench_one(b, L):
    torch.manual_seed(0)
    nbytes = 2 * b * L * H_K * D * 2
    q = torch.randn(b, 1, H, D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)
    recs = []
    base = {"op": "decode", "dtype": "bf16", "b": b, "s_q": 1, "s_k": L, "h": H, "h_k": H_K,
            "d": D, "causal": False, "dropout": 0.0, "torch_efficient": None}

    k = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, L, H_K, D, device="cuda", dtype=torch.bfloat16)
    rec = dict(base, paged=0)
    run_sdpa = lambda: sdpa.forward(q, k, v, cache_seqlens=seqlens, out=out)
    rec["sdpa"] = timed_gbps(run_sdpa, nbytes, f"sdpa b={b} L={L}")
    rec["sdpa_graph"] = timed_gbps(run_sdpa, nbytes, f"sdpa b={b} L={L}", graph=True)
    ref = out.clone()
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    for name, be in TORCH_BACKENDS.items():
        def run(be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        rec[name] = timed_gbps(run, nbytes, f"{name} b={b} L={L}")
        rec[name + "_graph"] = timed_gbps(run, nbytes, f"{name} b={b} L={L}", graph=True)
        if rec[name] is not None and name == "torch_flash":
            err = (run().transpose(1, 2).float() - ref.float()).abs().max().item()
            rec["max_abs_diff_vs_torch_flash"] = err
    recs.append(rec)
    del k, v, kt, vt

    for page in (16, 256):
        kp, vp, bt = paged_cache(b, L, page)
        rec = dict(base, paged=page, torch_flash=None, torch_cudnn=None)
        run_paged = lambda: sdpa.forward(q, kp, vp, cache_seqlens=seqlens, block_table=bt, out=out)
        rec["sdpa"] = timed_gbps(run_paged, nbytes, f"sdpa paged {page} b={b} L={L}")
        # in graph replay too: at b 1 the eager calls are bound by the host, so
        # eager paged / contiguous measures the binding, not the kernels
        rec["sdpa_graph"] = timed_gbps(run_paged, nbytes, f"sdpa paged {page} b={b} L={L}",
                                       graph=True)
        recs.append(rec)
        del kp, vp, bt
    # no torch.cuda.empty_cache(): the driver's work on memory handed back
    # slows the next cell's first timings (common.py, the memory rule)
    return recs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="batch {8, 64}, L {16k, 128k}")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--lens", default="4096,16384,65536,131072")
    args = ap.parse_args()
    batches = [8, 64] if args.quick else [int(x) for x in args.batches.split(",")]
    lens = [16384, 131072] if args.quick else [int(x) for x in args.lens.split(",")]
    gpu = torch.cuda.get_device_name()
    records = []
    for b in batches:
        for L in lens:
            for rec in bench_one(b, L):
                records.append(rec)
                print(f"decode b={b} L={L} paged={rec['paged']}: " + ", ".join(
                    f"{n}={rec.get(n) or 0:.0f}" for n in ("sdpa", *TORCH_BACKENDS)) + " GB/s",
                    flush=True)
    for r in records:
        for name in TORCH_BACKENDS:
            if r.get("sdpa") and r.get(name):
                r["x_" + name.split("_")[1]] = r["sdpa"] / r[name]
    cols = ["b", "s_k", "paged", "sdpa", "torch_flash", "torch_cudnn", "x_flash", "x_cudnn",
            "sdpa_graph", "torch_flash_graph", "torch_cudnn_graph"]
    table = markdown_table(records, cols)
    path = write_results(gpu, [{k: v for k, v in r.items() if not k.startswith("x_")} for r in records],
                         suffix="-decode",
                         extra={"unit": "GB/s of K/V read",
                                "torch_call": "F.scaled_dot_product_attention(q [b,32,1,128], "
                                              "k/v [b,8,L,128] views, enable_gqa=True)"})
    with open(path[:-5] + ".md", "w") as f:
        f.write(f"# {gpu}, decoding GB/s of K/V read (bf16, h 32/8, d 128, s_q 1), "
                f"x_* = sdpa / torch backend\n\n{table}\n")
    print(table)
    print("wrote", path)


if __name__ == "__main__":
    main()
