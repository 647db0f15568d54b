#!/usr/bin/env bash
# sglang's DeepSeek-V4 compress-plan and KV-store kernels, pristine and patched, on a GPU.
#
# For every sglang wheel in WHEEL_DIR: unzip it twice, patch one copy with
# scripts/apply-patches (the image's mechanism), build both trees' kernels and run
# benchmarks/dsv4_kernel_check.py on them, then again under NVIDIA compute-sanitizer
# (racecheck on the plan kernel, memcheck on the store kernels). Writes to OUT_DIR:
# summary.md (the tables of docs/benchmarks.md and every sanitizer verdict),
# run.log, and results.tar.gz (each check's JSON and each sanitizer's full log).
#
# Usage (repository root, CUDA machine, Python with torch):
#   benchmarks/dsv4_kernel_check.sh WHEEL_DIR OUT_DIR
# WHEEL_DIR: sglang-<version>-*.whl files and apache_tvm_ffi-*.whl (sglang's pin,
# 0.1.11, for this Python). PYTHON picks the interpreter (default python3).
set -uo pipefail

[ $# -eq 2 ] || { echo "usage: $0 WHEEL_DIR OUT_DIR" >&2; exit 2; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheels=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
py=${PYTHON:-python3}
work=$(mktemp -d)
check=("$py" "$repo/benchmarks/dsv4_kernel_check.py")
results=$work/results
mkdir -p "$results"

say() { printf '\n== %s\n' "$*"; }

main() {
say environment
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc --version | tail -2
compute-sanitizer --version | tail -1
"$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'

tvm=$(compgen -G "$wheels/apache_tvm_ffi-*.whl" | head -1)
[ -n "$tvm" ] || { echo "no apache_tvm_ffi wheel in $wheels" >&2; exit 2; }
"$py" -m pip install -q --no-index --no-deps --target "$work/site" "$tvm" || exit 1
export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}

say trees
trees=()
for wheel in "$wheels"/sglang-*.whl; do
  version=$(basename "$wheel" | cut -d- -f2)
  for state in pristine patched; do
    tree=$work/$version-$state
    "$py" -m zipfile -e "$wheel" "$tree" || exit 1
    if [ "$state" = patched ]; then
      "$py" "$repo/scripts/apply-patches" --site-packages "$tree" || exit 1
    fi
    trees+=("$version-$state")
  done
done

say "plan and store checks (builds the kernels; trees in parallel)"
for name in "${trees[@]}"; do
  (
    state=${name#*-}
    "${check[@]}" plan --tree "$work/$name" --state "$state" --build "$work/build-$name" \
      --json "$results/plan-$name.json" &&
    "${check[@]}" store --tree "$work/$name" --state "$state" --build "$work/build-$name" \
      --json "$results/store-$name.json"
  ) > "$results/check-$name.log" 2>&1 &
done
wait
for name in "${trees[@]}"; do echo "-- $name"; tail -3 "$results/check-$name.log"; done

# Sanitize only the kernels under test: torch's own kernels are not the subject.
# (Read the help once: `grep -q` in a pipe would end it early and trip pipefail.)
help=$(compute-sanitizer --help 2>&1)
if grep -q -- '--kernel-name' <<<"$help"; then only=--kernel-name; else only=--filter; fi
padding=()
if grep -q -- '--padding' <<<"$help"; then padding=(--padding 1048576); fi

say "compute-sanitizer (racecheck: plan kernel0; memcheck: store kernels, index -1)"
for name in "${trees[@]}"; do
  (
    timeout 300 compute-sanitizer --tool racecheck "$only" kns=plan_compress_prefill_kernel0 \
      "${check[@]}" race --state "${name#*-}" --tree "$work/$name" --build "$work/build-$name" \
      > "$results/racecheck-$name.log" 2>&1
    # One kernel per run: the first out-of-bounds write ends the process.
    for kernel in flashmla indexer; do
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck \
        "${padding[@]}" "$only" kns=fused_store_$kernel \
        "${check[@]}" store --standalone --kernel "$kernel" --state "${name#*-}" --tree "$work/$name" \
        --build "$work/build-$name" > "$results/memcheck-$kernel-$name.log" 2>&1
    done
  ) &
done
wait

{
  echo "# DeepSeek-V4 compress plan and KV-store kernels: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  "${check[@]}" report "$results"/plan-*.json "$results"/store-*.json
  echo
  echo "### compute-sanitizer"
  echo
  echo "| tree | racecheck (plan_compress_prefill_kernel0) | memcheck, fused_store_flashmla_cache (index -1) | memcheck, fused_store_indexer_cache (index -1) |"
  echo "|---|---|---|---|"
  for name in "${trees[@]}"; do
    race=$(grep -h "SUMMARY" "$results/racecheck-$name.log" | tr '\n' ' ')
    flashmla=$(grep -h "ERROR SUMMARY" "$results/memcheck-flashmla-$name.log" | head -1)
    indexer=$(grep -h "ERROR SUMMARY" "$results/memcheck-indexer-$name.log" | head -1)
    echo "| $name | ${race:-no summary (see log)} | ${flashmla:-no summary (see log)} | ${indexer:-no summary (see log)} |"
  done
} > "$out/summary.md"
cat "$out/summary.md"
tar -czf "$out/results.tar.gz" -C "$work" results
}

main 2>&1 | tee "$out/run.log"
status=${PIPESTATUS[0]}
rm -rf "$work"
exit "$status"
