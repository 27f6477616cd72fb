"""Collects runs of the upstream-test kit (FlashAttention 2.6.3's and xformers 0.0.28's
own test files against python/flash_attn_shim and python/xformers_shim) into
bench/results/<date>-<gpu>-upstream.json:

    {"gpu", "commit", "date", "upstream": [{"suite": "fa"|"xf", "passed", "failed",
     "skipped", "seed", "failures": [[nodeid, category], ...]}, ...]}

    python3 bench/upstream_record.py --gpu h100 --commit abc1234 OUT_SEED1 OUT_SEED2 ...

Each OUT folder holds the kit's upstream_fa.json / upstream_xf.json (run.sh with $OUT
set). Prints a table of the runs, pass rate per suite and seed."""
import argparse
import datetime
import json
import os
import sys


def read_runs(folders):
    runs = []
    for folder in folders:
        for suite in ("fa", "xf"):
            path = os.path.join(folder, "upstream_%s.json" % suite)
            if not os.path.exists(path):
                continue
            with open(path) as f:
                d = json.load(f)
            runs.append({"suite": suite, "passed": d["passed"], "failed": d["failed"],
                         "skipped": d["skipped"], "errors": d.get("errors", 0), "seed": d["seed"],
                         "failures": [[x.get("nodeid"), x.get("category")]
                                      for x in d.get("failures", [])]})
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", help="the results file (default: print it)")
    a = ap.parse_args()
    runs = read_runs(a.folders)
    if not runs:
        sys.exit("upstream_record: no upstream_{fa,xf}.json in %s" % a.folders)
    doc = {"gpu": a.gpu, "commit": a.commit, "date": datetime.date.today().isoformat(),
           "upstream": runs}
    text = json.dumps(doc, indent=1) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    for r in runs:
        ran = r["passed"] + r["failed"] + r["errors"]
        print("%s seed %s: %d passed, %d failed, %d skipped (%.1f%% of %d run)"
              % (r["suite"], r["seed"], r["passed"], r["failed"], r["skipped"],
                 100.0 * r["passed"] / max(ran, 1), ran), file=sys.stderr)


if __name__ == "__main__":
    main()
