"""Shared pieces of the benchmarks: locating the sdpa package, the results file
(docs/design.md §8 schema), GPU timing with CUDA events, and the A/B scripts'
swap of one libsdpa build for another in the same process (--libs).

Timing rule (METHOD.md): warm up, then time `reps` back-to-back calls between
two events (so host-side call overhead overlaps device work, as in a real
model loop), repeat `trials` times and take the median.

Memory rule: never hand memory back to the driver between timings
(torch.cuda.empty_cache(), or freeing outside torch's cache). On the H200 the
driver then works on the freed memory in the background, and every kernel for
a while after runs slower: with 34 GB freed, a decoding call (b 64, s_k 4k)
took 275 us instead of 242 for at least 67 ms, and was back to 240 after a
1 s pause (the graph replay of the same call slowed alike; freeing into
torch's cache alone did not slow it). bench_decode.py emptied the cache after
every cell until 2026-11-21, so the next cell's first timing (sdpa's eager
call) ran in that window. Torch's cache reuses what a cell frees; graphs are
captured with capture_graph below, since torch.cuda.graph() empties the cache
on entry.
"""
import datetime
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))


def commit():
    # The GPU host gets a copy of the tree without .git: the caller passes SDPA_COMMIT.
    if os.environ.get("SDPA_COMMIT"):
        return os.environ["SDPA_COMMIT"]
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                       stderr=subprocess.DEVNULL).decode().strip()
    except Exception:
        return "unknown"


def results_path(gpu, suffix=""):
    date = datetime.date.today().isoformat()
    tag = gpu.replace("NVIDIA ", "").replace(" ", "-").lower()
    out_dir = os.environ.get("SDPA_BENCH_OUT", os.path.join(HERE, "results"))
    os.makedirs(out_dir, exist_ok=True)
    return os.path.join(out_dir, f"{date}-{tag}{suffix}")


def write_results(gpu, records, suffix="", extra=None):
    doc = {"gpu": gpu, "commit": commit(), "date": datetime.date.today().isoformat(),
           "records": records}
    if extra:
        doc.update(extra)
    path = results_path(gpu, suffix) + ".json"
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path


def flops(op, b, h, s_q, s_k, d, causal, d_v=None):
    """An attention call's FLOPs: 2 b h s_q s_k (d + d_v) (d_v = d: 4 b h s_q s_k d),
    halved when causal; the backward (op "bwd...") 2.5 times the forward."""
    f = 2.0 * b * h * s_q * s_k * (d + (d if d_v is None else d_v))
    if causal:
        f /= 2
    return f * (2.5 if op.startswith("bwd") else 1.0)


def cuda_time_ms(fn, warmup=3, reps=10, trials=7):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def capture_graph(fn):
    """A CUDA graph of one call of fn, captured on a side stream as
    torch.cuda.graph() does, but without its torch.cuda.empty_cache() on entry
    (the memory rule above)."""
    import torch
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g.capture_begin()
        try:
            fn()
        finally:
            g.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    return g


def parse_libs(s):
    """--libs name=path,name=path,...: [(name, path), ...]."""
    libs = [tuple(x.split("=", 1)) for x in s.split(",")]
    for x in libs:
        if len(x) != 2:
            raise SystemExit(f"--libs: {x[0]!r}: expected name=path")
    return libs


def use_library(path):
    """Load another build of libsdpa (the .so at path) in place of the current
    one: sdpa's calls from here on go to it (a call goes to the library current
    when it runs, not when the lambda making it was written). Returns the
    library, for use_loaded."""
    from sdpa import _lib
    os.environ["SDPA_LIBRARY"] = path
    _lib._lib = None
    return _lib.lib()


def use_loaded(lib):
    """Send sdpa's calls to lib (a use_library result) again."""
    from sdpa import _lib
    _lib._lib = lib


def markdown_table(records, cols):
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in records:
        cells = []
        for c in cols:
            v = r.get(c)
            if v is None:
                cells.append("-")
            elif isinstance(v, float):
                if c.startswith(("rel_", "max_abs")):  # error measures, 1e-6 .. 1
                    cells.append(f"{v:.1e}")
                else:
                    cells.append(f"{v:.2f}" if c.startswith(("x_", "ratio")) else f"{v:.1f}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def with_ratios(records, base="sdpa", others=("torch_flash", "torch_cudnn")):
    """Records with x_<backend> = base / backend added where both ran."""
    out = []
    for r in records:
        r = dict(r)
        for name in others:
            if r.get(base) and r.get(name):
                r["x_" + name.split("_", 1)[1]] = r[base] / r[name]
        out.append(r)
    return out


# The columns of bench.py's default grid; a run of another mode stores its own
# ("columns", "ratio_of", "title" in the results file) so that a re-render matches it.
DEFAULT_COLUMNS = ["op", "d", "causal", "s_q", "b", "h", "sdpa", "torch_flash", "torch_cudnn",
                   "torch_efficient", "x_flash", "x_cudnn"]


def render_markdown(json_path):
    """Writes the markdown table of a results file beside it (same name, .md) and
    returns the table."""
    with open(json_path) as f:
        doc = json.load(f)
    others = tuple(doc.get("ratio_of", ("torch_flash", "torch_cudnn")))
    table = markdown_table(with_ratios(doc["records"], others=others),
                           doc.get("columns", DEFAULT_COLUMNS))
    title = doc.get("title", "TFLOP/s (bf16), x_* = sdpa / torch backend")
    with open(json_path[:-5] + ".md", "w") as f:
        f.write(f"# {doc['gpu']} {doc['date']} commit {doc['commit']}: {title}\n\n{table}\n")
    return table


if __name__ == "__main__":
    # python3 bench/common.py <results.json>: re-render the markdown table beside it
    render_markdown(sys.argv[1])
