#!/usr/bin/env bash
# variants.sh - tile-size experiments on the GPU machine: for each argument
# "label|sed-expression|extra CUDA flags" build the library (bf16 rows only)
# with kernels.def edited by the sed expression (may be empty) in a scratch
# copy of the tree, and print $VARIANT_TEST --bench (default test_gpu_fwd;
# test_gpu_bwd for the backward rows).
#   tests/gpu/variants.sh 'd64_128x128|s/hd64, BF16, 32, 64, 128, 64, 4/hd64, BF16, 32, 64, 128, 128, 4/|'
#   tests/gpu/variants.sh 'lineinfo||-lineinfo'   (extra nvcc flags, e.g. -D experiment switches)
set -u
test=${VARIANT_TEST:-test_gpu_fwd}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp}
for spec in "$@"; do
  label=${spec%%|*}
  rest=${spec#*|}
  expr=${rest%%|*}
  flags=${rest#*|}
  dir=/tmp/variant_$label
  rm -rf "$dir"
  mkdir -p "$dir"
  (cd "$root" && tar --exclude='./build*' -cf - .) | (cd "$dir" && tar xf -)
  [ -n "$expr" ] && sed -i "$expr" "$dir/src/cuda/kernels.def"
  grep -E "^SDPA_[A-Z]+_KERNEL.*bf16" "$dir/src/cuda/kernels.def" | diff - <(grep -E "^SDPA_[A-Z]+_KERNEL.*bf16" "$root/src/cuda/kernels.def") | grep "^<"
  if ! (cmake -S "$dir" -B "$dir/build" -DSDPA_CUDA=ON -DSDPA_CUDA_ARCHS="${SDPA_CUDA_ARCHS:-90a}" \
        -DSDPA_KERNELS=bf16 -DSDPA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="$flags" > "$out/variant_$label.log" 2>&1 &&
        cmake --build "$dir/build" -j16 --target "$test" >> "$out/variant_$label.log" 2>&1); then
    echo "variant $label: build failed"; tail -20 "$out/variant_$label.log"; continue
  fi
  grep -i "spill" "$out/variant_$label.log" | head -5
  echo "== variant $label"
  "$dir/build/$test" --bench
done
