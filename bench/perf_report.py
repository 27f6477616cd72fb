#!/usr/bin/env python3
"""Writes docs/performance.md from the results files in bench/results (stdlib only).

bench/results keeps the latest run per operation kind and GPU (git keeps the
history). This script reads every *.json there, sorts each file's records into
operation kinds (fwd, bwd, dropout, bias, f32, decode, cpu, train, upstream; a
*-build.json is the library size and build time), takes the latest file of each
kind and GPU (by the file's date, then by git commit order of its "commit"
field, then by when git added the file), and writes one table per kind and GPU
with the file, commit, date and the command that reproduces it.

    python3 bench/perf_report.py            write docs/performance.md
    python3 bench/perf_report.py --check    exit 1 if docs/performance.md is not what
                                            this script would write (for CI)
    python3 bench/perf_report.py --stale    print the results files that no kind uses
                                            (superseded runs, ad-hoc .txt / .png / .md):
                                            git rm $(python3 bench/perf_report.py --stale)

After a benchmark run: put its results file (and the .md the benchmark writes
beside it) in bench/results, remove the file it supersedes (--stale lists it),
run this script and commit the three together.
"""
import argparse
import difflib
import functools
import glob
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
OUTPUT = os.path.join(ROOT, "docs", "performance.md")

# ---- operation kinds ---------------------------------------------------------------------

KIND_ORDER = ["fwd", "bwd", "dropout", "bias", "f32", "f32_bias", "hdim", "mla", "decode", "decode_mla",
              "cpu", "train", "upstream",
              "ring"]

KIND_TITLES = {
    "fwd": "Forward",
    "bwd": "Backward",
    "dropout": "Forward with dropout",
    "bias": "Full bias (forward, and backward with dbias)",
    "f32": "fp32 (forward and backward)",
    "decode": "Decoding (KV cache, split-KV)",
    "decode_mla": "MLA decoding (d_qk 576, d_v 512, the latent cache)",
    "cpu": "CPU forward",
    "train": "End-to-end training check (tests/python/train_gpt.py)",
    "upstream": "Upstream test suites (FlashAttention 2.6.3, xformers 0.0.28)",
    "ring": "Context parallelism (ring attention over NCCL, one host)",
    "dbias_bcast": "dbias of broadcast biases (the backward, against the full bias's)",
    "f32_bias": "fp32 with a full bias",
    "hdim": "Head dims between and past the buckets",
    "mla": "MLA prefill and training shapes (d_qk 192, d_v 128)",
}

KIND_NOTES = {
    "fwd": "bench.py's grid: d in {64, 128, 256} (`--dims`: others), causal off / on, "
           "b * s = 16384, h = 2048 // d.",
    "bwd": "bench.py's grid (dq, dk, dv): d in {64, 128, 256} (`--dims`: others), causal off / "
           "on, b * s = 16384, h = 2048 // d.",
    "dropout": "Each shape at p = 0 and at p > 0; `sdpa / p = 0` is sdpa's figure over its own "
               "figure at p = 0 (the cost of dropout).",
    "bias": "A full [b, h, s, s] bf16 bias (torch: attn_mask); bwd_bias includes dbias. Outputs "
            "checked against torch EFFICIENT on each cell's first call (`check`, `rel diff` = "
            "max|sdpa - EFFICIENT| / max|EFFICIENT|).",
    "f32": "fp32 q, k, v; torch EFFICIENT's fp32 kernels run 3xTF32 on the tensor cores. Outputs "
           "checked against torch EFFICIENT (`check`, `rel diff`).",
    "decode": "One new query per sequence, every sequence with a full cache of s_k tokens; "
              "`paged` is the page size (0: contiguous; torch runs contiguous only). Eager "
              "columns time back-to-back calls (host cost included); graph columns time "
              "CUDA-graph replays of one call (device time only).",
    "decode_mla": "bf16, 128 query heads on one kv head, s_q 1, a cache paged in pages of 64 "
                  "whose v is k's first 512 columns; CUDA-graph replays (device time). "
                  "`roofline`: max(bytes / BW, FLOPs / PEAK) as a rate (bytes: the cache read "
                  "once, q and out; on an H200 BW 4.0 TB/s, PEAK 790 TFLOP/s), "
                  "`sdpa_vs_roofline` sdpa's fraction of it. torch EFFICIENT runs the cache "
                  "contiguous and expanded to the 128 heads; `sdpa_simt` is sdpa's SIMT row "
                  "(the path before the MLA row) on the smaller cells.",
    "cpu": "sdpa's CPU backend against torch's CPU scaled_dot_product_attention, same thread "
           "count, one process.",
    "train": "A 4-layer GPT trained twice from the same initialisation on the same data: "
             "attention through sdpa's flash_attn_func, then through torch SDPA. Wall times "
             "include warm-up.",
    "upstream": "The drop-in shims (python/flash_attn_shim, python/xformers_shim) against the "
                "upstream projects' own test files, unchanged, sampled per seed.",
    "f32_bias": "fp32 q, k, v and a full [b, h, s, s] fp32 bias (torch: attn_mask); bwd_bias_f32 "
                "includes dbias; torch EFFICIENT's fp32 kernels run 3xTF32. Outputs checked "
                "against torch EFFICIENT (`check`, `rel diff`).",
    "hdim": "bf16, s 4096, b 4, h 16, causal off / on, each checked against torch EFFICIENT on "
            "its first call. `sdpa_bucket`: sdpa at d = d_bucket, the bucket the head dim pads "
            "to (same b, s, h). FLOPs count d, not the bucket. Tensors contiguous, so d 100's "
            "rows (200 bytes) are not 16-byte aligned: `fwd_staged` / `bwd_staged` copy them.",
    "mla": "bf16, d_qk 192, d_v 128, h 16, b * s = 16384, causal off / on, each checked against "
           "torch EFFICIENT on its first call; FLOPs 2 b h s^2 (d_qk + d_v), halved when "
           "causal, x2.5 backward. torch FLASH takes no d_v != d_qk. `sdpa_d192`: sdpa at "
           "d_qk = d_v = 192 on the same b, s, h.",
    "dbias_bcast": "bf16, d 128, s 2048, b 8, h 16: the backward with dbias of a full [b, h, s, s] "
                   "bias (dbias_full) and of [1, h, s, s] / [b, 1, s, s] ones (dbias_bcast, "
                   "summed over the broadcast dim), each against torch EFFICIENT with the same "
                   "bias; `t over full` = the call's time over the full-bias backward's.",
    "ring": "TFLOP/s a GPU (the whole problem's FLOPs over the ranks): `sdpa` is the ring "
            "(bench/ring_bench.py's docstring names every column), `sdpa_local` single-GPU "
            "sdpa on the same per-GPU work without transfers, `torch CP` torch's "
            "context_parallel; `needed_gbps` the bandwidth a GPU needs to hide a step's "
            "transfer (docs/design.md §9).",
}

KIND_UNITS = {"fwd": "TFLOP/s", "bwd": "TFLOP/s", "dropout": "TFLOP/s", "bias": "TFLOP/s",
              "f32": "TFLOP/s", "decode": "GB/s of K/V read", "cpu": "GFLOP/s",
              "ring": "TFLOP/s", "dbias_bcast": "TFLOP/s", "hdim": "TFLOP/s", "mla": "TFLOP/s",
              "f32_bias": "TFLOP/s", "decode_mla": "TFLOP/s"}

OP_KIND = {"fwd": "fwd", "bwd": "bwd", "fwd_bias": "bias", "bwd_bias": "bias",
           "fwd_f32": "f32", "bwd_f32": "f32", "decode": "decode", "ring_fwd": "ring",
           "ring_bwd": "ring", "dbias_full": "dbias_bcast", "dbias_bcast": "dbias_bcast",
           "fwd_bias_f32": "f32_bias", "bwd_bias_f32": "f32_bias", "fwd_hdim": "hdim", "bwd_hdim": "hdim", "fwd_mla": "mla", "bwd_mla": "mla",
           "decode_mla": "decode_mla"}

# The command that reproduces each kind, from the repository root on a machine with the
# library built (sdpa finds build/libsdpa.so, or set SDPA_LIBRARY=/path/to/libsdpa.so) and
# torch installed; scripts/gpu-check runs the same commands (BENCH_ARGS picks bench.py's
# mode). {placeholders} are filled from the results file (see command_for).
COMMANDS = {
    "fwd": "python3 bench/bench.py --ops {ops}{quick}{dims}",
    "bwd": "python3 bench/bench.py --ops {ops}{quick}{dims}",
    "dropout": "python3 bench/bench.py --dropout {p}",
    "bias": "python3 bench/bench.py --bias{ops_flag}",
    "f32": "python3 bench/bench.py --f32{ops_flag}",
    "decode": "python3 bench/bench_decode.py{decode_flags}",
    "cpu": "python3 bench/cpu_bench.py --threads {threads}{seqlen_flag}",
    "ring": "python3 bench/ring_bench.py --world {world}",
    "dbias_bcast": "python3 bench/bench.py --dbias-bcast",
    "f32_bias": "python3 bench/bench.py --f32-bias{ops_flag}",
    "hdim": "python3 bench/bench.py --hdim",
    "mla": "python3 bench/bench.py --mla",
    "decode_mla": "python3 bench/bench_decode_mla.py{mla_flags}",
    "train": "python3 tests/python/train_gpt.py {train_flags} --json {path}",
    "upstream": "for s in {seeds}; do KIT_SEED=$s OUT=/tmp/upstream-$s "
                "SDPA_LIBRARY=$PWD/build-gpu/libsdpa.so bash .upstream/run.sh .; done; "
                "python3 bench/upstream_record.py --gpu {gpu} "
                "--commit $(git rev-parse --short HEAD) "
                "--out bench/results/$(date +%F)-{gpu}-upstream.json {folders}",
}

COMMAND_NOTES = {
    "upstream": "`.upstream` is a copy of the upstream-test kit, `shared/upstream-tests`; "
                "see its README",
    "train": "scripts/gpu-check's `train` step",
}

# ---- columns -----------------------------------------------------------------------------

REF_ORDER = ["torch_flash", "torch_cudnn", "torch_efficient", "torch_cpu"]
LABELS = {"sdpa": "sdpa", "torch_flash": "torch FLASH", "torch_cudnn": "torch cuDNN",
          "torch_efficient": "torch EFFICIENT", "torch_cpu": "torch CPU",
          "s_q": "s_q", "s_k": "s_k", "h": "h", "h_k": "h_k", "b": "b", "d": "d", "d_v": "d_v",
          "causal": "causal", "paged": "paged", "dropout": "dropout p", "dtype": "dtype",
          "threads": "threads", "torch_cp": "torch CP", "sdpa_ring_checked": "sdpa checked",
          "sdpa_local": "sdpa local"}
SHORT = {"torch_flash": "FLASH", "torch_cudnn": "cuDNN", "torch_efficient": "EFFICIENT",
         "torch_cpu": "torch CPU"}
SHAPE_ORDER = ["dtype", "d", "d_v", "d_bucket", "causal", "dropout", "s_q", "s_k", "b", "h", "h_k", "paged",
               "threads"]


def is_diag(k):
    return k.startswith(("max_abs_diff", "rel_diff"))


def is_measure(k):
    return (k in ("sdpa", "sdpa_graph", "check", "sdpa_kernel", "ratio", "sdpa_local",
                  "sdpa_ring_checked", "needed_gbps", "sdpa_bucket", "sdpa_d192") or k.startswith("torch_")
            or k.startswith("x_") or k.endswith("_ms") or k.endswith("_note") or is_diag(k))


def label(k):
    if k in LABELS:
        return LABELS[k]
    if k.endswith("_graph"):
        return label(k[:-6]) + " graph"
    return k


def fmt(v, kind="num"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if kind == "ratio":
            return f"{v:.2f}"
        if kind == "sci":
            return f"{v:.1e}"
        if kind == "num":
            return f"{v:.1f}"
        return f"{v:g}"
    return str(v).replace("|", "\\|")


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# ---- reading and choosing ----------------------------------------------------------------

NAME_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})-([^-]+(?:-\d+t-[^-]+)?)")


def gpu_key(gpu):
    """'NVIDIA H200' / 'NVIDIA H100 80GB HBM3' / 'h100' -> 'H200' / 'H100'; a CPU host
    ('cpu-16t-x86_64') stays as it is."""
    g = (gpu or "unknown").strip()
    if g.lower().startswith("cpu"):
        return g
    g = re.sub(r"^nvidia\s+", "", g, flags=re.I)
    return g.split()[0].upper() if g else "unknown"


def load(path):
    """A results file as {"path", "name", "gpu", "key", "commit", "date", "doc", "kinds":
    {kind: records}}, or None (with the reason) for a file this script does not read."""
    name = os.path.basename(path)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"unreadable: {e}"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    m = NAME_RE.match(name)
    gpu = doc.get("gpu") or doc.get("host") or (m.group(2) if m else None)
    date = doc.get("date") or (m.group(1) if m else None)
    kinds = {}
    if name.endswith("-build.json"):
        kinds["build"] = doc.get("records") or []
    elif "upstream" in doc:
        kinds["upstream"] = doc["upstream"]
    elif isinstance(doc.get("sdpa"), list) and "args" in doc:
        kinds["train"] = [doc]
    elif isinstance(doc.get("records"), list):
        recs = doc["records"]
        if str(gpu).lower().startswith("cpu"):
            kinds["cpu"] = recs
        elif any((r.get("dropout") or 0) > 0 for r in recs):
            kinds["dropout"] = recs
        else:
            for r in recs:
                kinds.setdefault(OP_KIND.get(r.get("op"), str(r.get("op"))), []).append(r)
    if not kinds:
        return None, "no records, upstream runs or training curves"
    return {"path": path, "name": name, "gpu": gpu, "key": gpu_key(gpu),
            "commit": doc.get("commit"), "date": date, "doc": doc, "kinds": kinds}, None


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=None)
def commit_time(c):
    r = git("show", "-s", "--format=%ct", f"{c}^{{commit}}") if c else None
    return int(r.stdout.strip()) if r is not None and r.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def is_ancestor(a, b):
    r = git("merge-base", "--is-ancestor", a, b)
    return r is not None and r.returncode == 0


@functools.lru_cache(maxsize=None)
def added_time(path):
    """When git first added the file (unix time); a file git does not have yet is newest."""
    r = git("log", "--diff-filter=A", "--format=%ct", "--", os.path.relpath(path, ROOT))
    t = r.stdout.split() if r is not None and r.returncode == 0 else []
    return int(t[-1]) if t else float("inf")


def newer(a, b):
    """> 0 if results file a is a later run than b: the date, then git order of the commit
    fields (ancestry, else commit time), then when git added the file, then the name."""
    if (a["date"] or "") != (b["date"] or ""):
        return 1 if (a["date"] or "") > (b["date"] or "") else -1
    ca, cb = a["commit"], b["commit"]
    if ca and cb and ca != cb and commit_time(ca) is not None and commit_time(cb) is not None:
        if is_ancestor(cb, ca):
            return 1
        if is_ancestor(ca, cb):
            return -1
        if commit_time(ca) != commit_time(cb):
            return 1 if commit_time(ca) > commit_time(cb) else -1
    ta, tb = added_time(a["path"]), added_time(b["path"])
    if ta != tb:
        return 1 if ta > tb else -1
    return (a["name"] > b["name"]) - (a["name"] < b["name"])


def choose(files):
    """{(gpu key, kind): the latest file holding that kind}."""
    best = {}
    for f in files:
        for kind in f["kinds"]:
            k = (f["key"], kind)
            if k not in best or newer(f, best[k]) > 0:
                best[k] = f
    return best


# ---- commands ----------------------------------------------------------------------------

def command_for(kind, f):
    recs = f["kinds"][kind]
    doc = f["doc"]
    v = {}
    if kind in ("fwd", "bwd"):
        ops = sorted({r.get("op") for r in doc["records"]} & {"fwd", "bwd"},
                     key=["fwd", "bwd"].index)
        v["ops"] = ",".join(ops)
        seqs = {r.get("s_q") for r in doc["records"]}
        v["quick"] = " --quick" if seqs <= {1024, 4096} else ""
        dims = sorted({r.get("d") for r in doc["records"]})
        v["dims"] = "" if dims == [64, 128, 256] else " --dims " + ",".join(map(str, dims))
    elif kind == "dropout":
        ps = sorted({r.get("dropout") or 0 for r in recs} - {0})
        v["p"] = ",".join(f"{p:g}" for p in ps)
    elif kind in ("bias", "f32", "f32_bias"):
        ops = sorted({r["op"].split("_")[0] for r in recs}, key=["fwd", "bwd"].index)
        v["ops_flag"] = "" if ops == ["fwd", "bwd"] else " --ops " + ",".join(ops)
    elif kind == "decode":
        bs = sorted({r["b"] for r in recs})
        ls = sorted({r["s_k"] for r in recs})
        flags = ""
        if bs == [8, 64] and ls == [16384, 131072]:
            flags = " --quick"
        else:
            if bs != [1, 8, 32, 64]:
                flags += " --batches " + ",".join(map(str, bs))
            if ls != [4096, 16384, 65536, 131072]:
                flags += " --lens " + ",".join(map(str, ls))
        v["decode_flags"] = flags
    elif kind == "decode_mla":
        bs = sorted({r["b"] for r in recs})
        ls = sorted({r["s_k"] for r in recs})
        v["mla_flags"] = ("" if bs == [8, 32, 128] else " --batches " + ",".join(map(str, bs))) + \
                         ("" if ls == [1024, 4096, 16384, 32768] else
                          " --lens " + ",".join(map(str, ls)))
    elif kind == "ring":
        v["world"] = recs[0].get("world", 4)
    elif kind == "cpu":
        v["threads"] = recs[0].get("threads", "$(nproc)")
        s = recs[0].get("s_q", 2048)
        v["seqlen_flag"] = "" if s == 2048 else f" --seqlen {s}"
    elif kind == "train":
        args = doc.get("args", {})
        v["train_flags"] = " ".join(f"--{k.replace('_', '-')} {args[k]}" for k in
                                    ("steps", "batch", "seq", "vocab", "d_model", "layers",
                                     "heads", "kv_heads", "lr") if k in args)
        v["path"] = "bench/results/$(date +%F)-" + f["key"].lower() + "-train_gpt.json"
    elif kind == "upstream":
        seeds = []
        for r in recs:
            if str(r.get("seed")) not in seeds:
                seeds.append(str(r.get("seed")))
        v["seeds"] = " ".join(seeds)
        v["gpu"] = f["key"].lower()
        v["folders"] = " ".join(f"/tmp/upstream-{s}" for s in seeds)
    return COMMANDS[kind].format(**v)


# ---- rendering ---------------------------------------------------------------------------

def source_line(kind, f):
    doc = f["doc"]
    rel = os.path.relpath(f["path"], ROOT)
    commit = f["commit"] or "not recorded"
    bits = [f"- Source: `{rel}` (commit {commit}, {f['date']}, {f['gpu']}"]
    if isinstance(doc.get("torch"), str):
        bits.append(f", torch {doc['torch']}")
    bits.append(").")
    out = ["".join(bits), f"- Reproduce: `{command_for(kind, f)}`"]
    if kind in COMMAND_NOTES:
        out[-1] += f" ({COMMAND_NOTES[kind]})"
    if doc.get("note"):
        out.append(f"- Note in the file: {doc['note']}.")
    return "\n".join(out)



def best_of(r, names):
    got = [(r[k], k) for k in names if isinstance(r.get(k), (int, float)) and r[k] > 0]
    return max(got) if got else None


def ratio_cells(r, key, refs, acc, named):
    """r[key] / the best of refs (appended to acc), and the best one's short
    name when named; "-" cells where either side is missing."""
    b = best_of(r, refs)
    if b and isinstance(r.get(key), (int, float)):
        acc.append(r[key] / b[0])
        return [fmt(r[key] / b[0], "ratio")] + ([SHORT.get(b[1], b[1])] if named else [])
    return ["-"] * (2 if named else 1)

def records_table(kind, recs, unit):
    """The markdown of one op's records: the shape fields that vary as columns (those that
    do not, in a line above), sdpa and each reference, sdpa / the best reference."""
    keys = []
    for r in recs:
        for k in r:
            if k not in keys:
                keys.append(k)
    shape = [k for k in keys if not is_measure(k) and k != "op"
             and all(not isinstance(r.get(k), (dict, list)) for r in recs)]
    shape.sort(key=lambda k: (SHAPE_ORDER.index(k) if k in SHAPE_ORDER else len(SHAPE_ORDER), k))
    fixed = [k for k in shape if len({json.dumps(r.get(k)) for r in recs}) == 1]
    varying = [k for k in shape if k not in fixed]
    merged = {}
    for a, b in (("s_q", "s_k"), ("h", "h_k")):  # one column where the two are always equal
        if a in varying and b in varying and all(r.get(a) == r.get(b) for r in recs):
            varying.remove(b)
            merged[a] = f"{a} = {b}"
    lines = []
    if fixed:
        lines.append("Same in every row: " + ", ".join(
            f"{label(k)} {fmt(recs[0].get(k), 'g')}" for k in fixed) + ".")
    unnamed = sorted(k for k in keys if k.startswith("torch_") and k not in REF_ORDER
                     and not k.endswith(("_graph", "_note", "_ms")))
    refs_all = [k for k in REF_ORDER + unnamed if k in keys]
    refs = [k for k in refs_all if any(isinstance(r.get(k), (int, float)) for r in recs)]
    absent = [k for k in refs_all if k not in refs]
    graph = "sdpa_graph" in keys
    grefs = [k + "_graph" for k in refs if any(isinstance(r.get(k + "_graph"), (int, float))
                                               for r in recs)]
    times = [k for k in keys if k.endswith("_ms")]
    diags = [k for k in keys if is_diag(k) and all(not isinstance(r.get(k), (dict, list))
                                                   for r in recs)]
    extra = [k for k in ("sdpa_bucket", "sdpa_d192", "check", "sdpa_kernel", "sdpa_ring_checked",
                         "sdpa_local", "needed_gbps") if k in keys]
    u = unit.split(" ")[0]
    header = [merged.get(k, label(k)) for k in varying]
    header += [f"{label(k)} [{u}]" for k in ["sdpa"] + refs]
    if len(refs) == 1:
        header.append(f"sdpa / {label(refs[0])}")
    elif refs:
        header += ["sdpa / best", "best"]
    if kind == "dropout":
        header.append("sdpa / p = 0")
    if graph:
        header += [f"{label(k)} [{u}]" for k in ["sdpa_graph"] + grefs]
        if grefs:
            header += ["graph: sdpa / best"]
    header += [f"{label(k[:-3])} [ms]" for k in times]
    header += [k.replace("_", " ") for k in diags] + [k.replace("_", " ") for k in extra]

    p0 = {}
    if kind == "dropout":
        for r in recs:
            if not r.get("dropout"):
                p0[json.dumps({k: r.get(k) for k in shape if k != "dropout"}, sort_keys=True)] = r
    rows, ratios, gratios = [], [], []
    for r in recs:
        row = [fmt(r.get(k), "g") for k in varying]
        row += [fmt(r.get(k)) for k in ["sdpa"] + refs]
        if refs:
            row += ratio_cells(r, "sdpa", refs, ratios, len(refs) > 1)
        if kind == "dropout":
            base = p0.get(json.dumps({k: r.get(k) for k in shape if k != "dropout"},
                                     sort_keys=True))
            ok = base and r.get("sdpa") and base.get("sdpa")
            row.append(fmt(r["sdpa"] / base["sdpa"], "ratio") if ok else "-")
        if graph:
            row += [fmt(r.get(k)) for k in ["sdpa_graph"] + grefs]
            if grefs:
                row += ratio_cells(r, "sdpa_graph", grefs, gratios, False)
        row += [fmt(r.get(k), "ratio") for k in times]
        row += [fmt(r.get(k), "sci") for k in diags]
        row += [fmt(r.get(k)) for k in extra]
        rows.append(row)
    lines.append("")
    lines.append(table(header, rows))
    ref = "best reference" if len(refs) > 1 else (label(refs[0]) if refs else "")
    for name, rs in ((f"sdpa / {ref}", ratios), (f"graph: sdpa / {ref}", gratios)):
        if rs:
            lines.append("")
            lines.append(f"{name}: min {min(rs):.2f}, median {statistics.median(rs):.2f}, "
                         f"max {max(rs):.2f} over {len(rs)} rows.")
    if absent:
        lines.append("")
        lines.append("Not run in any row (null: the backend cannot run these problems): "
                     + ", ".join(label(k) for k in absent) + ".")
    notes = sorted({f"{label(k[:-5])}: {r[k]}" for r in recs for k in r if k.endswith("_note")})
    for n in notes:
        lines.append("")
        lines.append(f"Note: {n}.")
    return "\n".join(lines)


def render_records(kind, f):
    recs = f["kinds"][kind]
    unit = f["doc"].get("unit") or f["doc"].get("units") or KIND_UNITS.get(kind, "")
    out = [f"Unit: {unit}, higher is better." if unit else ""]
    ops = []
    for r in recs:
        if r.get("op") not in ops:
            ops.append(r.get("op"))
    for op in ops:
        sub = [r for r in recs if r.get("op") == op]
        if len(ops) > 1:
            out.append(f"\n**{op}**\n")
        else:
            out.append("")
        out.append(records_table(kind, sub, unit))
    return "\n".join(out)


def render_upstream(f):
    runs = f["kinds"]["upstream"]
    suites = {"fa": "FlashAttention 2.6.3 tests", "xf": "xformers 0.0.28 tests"}
    rows = []
    for r in runs:
        ran = r.get("passed", 0) + r.get("failed", 0) + r.get("errors", 0)
        rows.append([suites.get(r.get("suite"), str(r.get("suite"))), fmt(r.get("seed")),
                     fmt(r.get("passed")), fmt(r.get("failed")), fmt(r.get("errors", 0)),
                     fmt(r.get("skipped")), f"{r.get('passed', 0)} / {ran}",
                     f"{100.0 * r.get('passed', 0) / max(ran, 1):.1f} %"])
    out = ["Unit: test counts.", "",
           table(["suite", "seed", "passed", "failed", "errors", "skipped", "passed / run",
                  "pass rate"], rows)]
    fails = [(r.get("suite"), r.get("seed"), x) for r in runs for x in r.get("failures", [])]
    if fails:
        out += ["", "Failures:", ""]
        out += [f"- {s} seed {seed}: `{x[0]}` ({x[1]})" for s, seed, x in fails]
    return "\n".join(out)


def render_train(f):
    doc = f["doc"]
    a = doc.get("args", {})
    shape = ", ".join(f"{k} {a[k]}" for k in ("steps", "batch", "seq", "vocab", "d_model",
                                             "layers", "heads", "kv_heads") if k in a)
    ls, lt = doc.get("sdpa") or [], doc.get("torch") or []
    rows = [["sdpa (flash_attn_func)", fmt(ls[0] if ls else None, "ratio"),
             fmt(ls[-1] if ls else None, "ratio"), fmt(doc.get("time_sdpa_s"), "ratio")],
            ["torch SDPA", fmt(lt[0] if lt else None, "ratio"),
             fmt(lt[-1] if lt else None, "ratio"), fmt(doc.get("time_torch_s"), "ratio")]]
    out = [f"Model: {shape}." if shape else "", "",
           table(["attention", "first loss", "last loss", "wall time [s]"], rows), "",
           f"Largest relative difference of the two loss curves: "
           f"{fmt(doc.get('max_rel_diff'), 'sci')}."]
    return "\n".join(out)


def render_build(files):
    out = ["## Library size and build time", ""]
    if not files:
        out.append("Not measured yet (no `bench/results/*-build.json`).")
        return "\n".join(out)
    for f in files:
        rel = os.path.relpath(f["path"], ROOT)
        out.append(f"- Source: `{rel}` (commit {f['commit'] or 'not recorded'}, "
                   f"{f['date'] or 'no date'}, {f['gpu'] or 'host not recorded'}).")
        if f["doc"].get("command"):
            out.append(f"- Reproduce: `{f['doc']['command']}`")
        out.append("")
        rows = []
        for r in f["kinds"]["build"]:
            archs = r.get("archs")
            if isinstance(archs, list):
                archs = " ".join(map(str, archs))

            def mib(x):
                return "-" if not isinstance(x, (int, float)) else f"{x / 2**20:.1f}"
            rows.append([fmt(archs), mib(r.get("libsdpa_so_bytes")), mib(r.get("wheel_bytes")),
                         fmt(r.get("build_seconds"), "num"), fmt(r.get("cores")),
                         fmt(r.get("note"))])
        out.append(table(["archs", "libsdpa.so [MiB]", "wheel [MiB]", "build time [s]", "cores",
                          "what"], rows) if rows else "No records.")
        out.append("")
    return "\n".join(out).rstrip()


def render(files):
    chosen = choose([f for f in files if "build" not in f["kinds"]])
    builds = choose([f for f in files if "build" in f["kinds"]])
    keys = sorted({k for k, _ in chosen}, key=lambda k: (k.lower().startswith("cpu"), k))
    out = ["# Performance", "",
           "<!-- Generated by `python3 bench/perf_report.py` from bench/results/*.json. "
           "Do not edit by hand. -->", "",
           "Generated by `python3 bench/perf_report.py` from the results files in "
           "`bench/results/`, which keep the latest run per operation and GPU (older runs are in "
           "git history). Do not edit this file by hand: rerun the benchmark, replace the "
           "results file it supersedes, and run the script again; "
           "`python3 bench/perf_report.py --check` fails while this file is stale.", "",
           "FLOPs (TFLOP/s, GFLOP/s): forward 2 b h s_q s_k (d + d_v) (4 b h s_q s_k d where d_v = d), halved when causal; backward "
           "2.5 times the forward. Decoding: GB/s of K and V read (2 b s_k h_k d 2 bytes a "
           "call). `sdpa / best` is sdpa's figure over the best reference in the same row "
           "(above 1: sdpa is faster); `best` names that reference. Every GPU figure is timed "
           "in one process with the references, on the same inputs (CUDA events, median of "
           "several trials after a warm-up). The commands run from the repository root with "
           "the library built (`build/libsdpa.so`, or `SDPA_LIBRARY=/path/to/libsdpa.so`) "
           "and torch installed; `scripts/gpu-check` runs the same ones on a GPU machine. A "
           "run writes `bench/results/<date>-<gpu>[-<kind>].json` (the files here also carry "
           "the commit in their name, added by hand).", "",
           "| GPU / host | operation | source | commit | date |", "|---|---|---|---|---|"]
    for key in keys:
        for kind in KIND_ORDER + sorted({k for g, k in chosen if k not in KIND_ORDER}):
            f = chosen.get((key, kind))
            if f:
                out.append(f"| {key} | [{kind}](#{anchor(key, kind)}) | `{f['name']}` | "
                           f"{f['commit'] or '-'} | {f['date']} |")
    for key in keys:
        names = sorted({f["gpu"] for (g, _), f in chosen.items() if g == key}, key=len)
        out += ["", f"## {names[-1] if names[-1] != key else key}"]
        for kind in KIND_ORDER + sorted({k for g, k in chosen if k not in KIND_ORDER}):
            f = chosen.get((key, kind))
            if not f:
                continue
            out += ["", f"### {key}: {KIND_TITLES.get(kind, kind)}", ""]
            out.append(f'<a id="{anchor(key, kind)}"></a>')
            out.append("")
            out.append(source_line(kind, f))
            if KIND_NOTES.get(kind):
                out += ["", KIND_NOTES[kind]]
            out.append("")
            if kind == "upstream":
                out.append(render_upstream(f))
            elif kind == "train":
                out.append(render_train(f))
            else:
                out.append(render_records(kind, f))
    out += ["", render_build(sorted({id(f): f for f in builds.values()}.values(),
                                    key=lambda f: f["name"]))]
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"
    return text, chosen, builds


def anchor(key, kind):
    return re.sub(r"[^a-z0-9]+", "-", f"{key}-{kind}".lower()).strip("-")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the output file differs from what would be written")
    ap.add_argument("--stale", action="store_true",
                    help="print the results files no kind uses (superseded or not readable)")
    ap.add_argument("--results", default=RESULTS, help="results folder (default bench/results)")
    ap.add_argument("--out", default=OUTPUT, help="output file (default docs/performance.md)")
    a = ap.parse_args()
    files = []
    unread = []
    for path in sorted(glob.glob(os.path.join(a.results, "*.json"))):
        f, why = load(path)
        if f is None:
            unread.append(path)
            print(f"perf_report: {os.path.relpath(path, ROOT)} skipped: {why}", file=sys.stderr)
        else:
            files.append(f)
    text, chosen, builds = render(files)
    used = {f["path"] for f in list(chosen.values()) + list(builds.values())}
    used |= {p[:-5] + ".md" for p in used}  # the markdown a benchmark writes beside its JSON
    stale = [p for p in sorted(glob.glob(os.path.join(a.results, "*"))) if p not in used]
    if a.stale:
        for p in stale:
            print(os.path.relpath(p, ROOT))
        return 0
    for p in stale:
        print(f"perf_report: {os.path.relpath(p, ROOT)} is not used (superseded or ad hoc): "
              f"git rm it", file=sys.stderr)
    if a.check:
        try:
            with open(a.out) as f:
                old = f.read()
        except OSError:
            old = None
        if old != text:
            print(f"perf_report: {os.path.relpath(a.out, ROOT)} is "
                  f"{'missing' if old is None else 'stale'}; run python3 bench/perf_report.py",
                  file=sys.stderr)
            if old is not None:
                sys.stderr.writelines(list(difflib.unified_diff(
                    old.splitlines(True), text.splitlines(True), "committed", "regenerated"))[:60])
            return 1
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(a.out, ROOT)} ({len(chosen)} tables from "
          f"{len({f['path'] for f in chosen.values()})} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
