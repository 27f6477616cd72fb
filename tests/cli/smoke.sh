#!/bin/sh
# smoke.sh - the `sdpa` command-line tool end to end on the CPU: help, version,
# the registry, explain, small checked runs of each problem family, and the
# exit codes (0 ok, 1 library error / failed check, 2 bad flags).
# usage: tests/cli/smoke.sh path/to/sdpa      (prints "N passed, N failed")
SDPA=${1:?usage: smoke.sh path/to/sdpa}
pass=0
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# expect RC NEEDLE -- ARGS...: exit code RC and NEEDLE somewhere in stdout+stderr
expect() {
  want=$1
  needle=$2
  shift 3
  "$SDPA" "$@" >"$out" 2>&1
  rc=$?
  if [ "$rc" -eq "$want" ] && grep -q -- "$needle" "$out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: sdpa $* -> exit $rc (want $want), looking for '$needle'; output:"
    sed 's/^/    /' "$out" | head -n 20
  fi
}

SHAPE="--device cpu -b 2 --heads 4 -d 32 --iters 2"
SMALL="$SHAPE -s 96"

expect 0 "usage: sdpa <command>" -- --help
expect 0 "^sdpa [0-9]" -- --version
expect 0 "usage: sdpa run" -- run --help
expect 0 "usage: sdpa explain" -- explain --help
expect 0 "usage: sdpa kernels" -- kernels --help
expect 0 "cpu_fwd" -- kernels
expect 0 "cpu_fwd" -- explain --device cpu -s 64
expect 0 "cpu_bwd" -- explain --device cpu -s 64 --bwd

expect 0 "PASS" -- run $SMALL
expect 0 "PASS" -- run $SMALL --dtype f32 --no-causal
expect 0 "PASS" -- run $SMALL --dtype f16 --kv-heads 2 --head-dim-v 16
expect 0 "PASS" -- run $SHAPE --seqlen-q 96 --seqlen-k 130 --varlen --align top-left
expect 0 "PASS" -- run $SMALL --window 16,4 --softcap 8 --alibi
expect 0 "PASS" -- run $SMALL --bias --dropout 0.2 --bwd
expect 0 "PASS" -- run $SMALL --varlen --bwd --kv-heads 1
expect 0 "PASS" -- run $SHAPE --cache 200 --seqlen-q 2 --new-kv 2 --rotary half --splits 3
expect 0 "PASS" -- run $SMALL --cache 200 --paged 16 --new-kv 1 --rotary interleaved --varlen
expect 0 "median" -- run $SMALL --no-check

expect 2 "unknown flag --foo (see sdpa run --help)" -- run --foo
expect 2 "bad value 'x' for --batch" -- run --batch x
expect 2 "--dtype needs a value" -- run --dtype
expect 2 "--paged needs --cache" -- run --paged 16
expect 2 "unknown command" -- frobnicate
expect 2 "unknown flag --iters" -- explain --iters 3
expect 2 "unknown flag" -- kernels --verbose
expect 2 "--causal and --no-causal contradict" -- run --causal --no-causal
expect 2 "--seqlen and --seqlen-k contradict" -- run --seqlen-k 100 -s 64
expect 2 "--heads given twice" -- run --heads 4 --heads 8
expect 2 "too large" -- run --device cpu -b 3000000000 -s 2 --no-check
expect 1 "SDPA_ERR_INVALID_ARGUMENT" -- run --device cpu -s 64 --heads 3 --kv-heads 2
expect 1 "no_such_kernel" -- run --device cpu -s 64 --kernel no_such_kernel

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
