#!/usr/bin/env bash
# The compress plan under DSPARK's ragged (compact) verify, and the KV-store kernels,
# on trees prepared beforehand (a GPU machine without the wheels or the patch tool).
#
# Prepare (any machine, repository root): for each sglang wheel, unzip it twice and
# patch one copy with scripts/apply-patches, then keep each tree's JIT sources:
#   benchmarks/dsv4_compact_check.sh --prepare WHEEL... TREES_DIR
# Run (CUDA machine, Python with torch; apache_tvm_ffi on PYTHONPATH):
#   benchmarks/dsv4_compact_check.sh TREES_DIR OUT_DIR
# Writes OUT_DIR/summary.md (benchmarks/dsv4_kernel_check.py report), each tree's
# plan-*.json / store-*.json, and the sanitizer logs (racecheck on the plan kernel,
# memcheck on the store kernels with an index of -1); for a tree with DeepSeek-V4.1's
# ratio-2 compressor (c2.cuh: sglang 0.5.23) also c2-*.json and its sanitizer logs.
# V4.1's checks alone (its ratio-2 ring, static and compact verify):
#   benchmarks/dsv4_compact_check.sh --v41 TREES_DIR OUT_DIR
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-python3}
check=("$py" "$repo/benchmarks/dsv4_kernel_check.py")

if [ "${1:-}" = --prepare ]; then
  shift
  [ $# -ge 2 ] || { echo "usage: $0 --prepare WHEEL... TREES_DIR" >&2; exit 2; }
  out=${*: -1}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$out"
  for wheel in "${@:1:$#-1}"; do
    version=$(basename "$wheel" | cut -d- -f2)
    for state in pristine patched; do
      tree=$work/$version-$state
      "$py" -m zipfile -e "$wheel" "$tree" || exit 1
      if [ "$state" = patched ]; then
        "$py" "$repo/scripts/apply-patches" --site-packages "$tree" || exit 1
      fi
      mkdir -p "$out/$version-$state/sglang/kernels"
      cp -r "$tree/sglang/kernels/jit" "$out/$version-$state/sglang/kernels/"
      cp -r "$tree"/sglang-*.dist-info "$out/$version-$state/"
    done
  done
  exit 0
fi

v41_only=
if [ "${1:-}" = --v41 ]; then v41_only=1; shift; fi
[ $# -eq 2 ] || { echo "usage: $0 [--v41] TREES_DIR OUT_DIR" >&2; exit 2; }
trees=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
build=$(mktemp -d)

{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc --version | tail -1
"$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
names=()
for tree in "$trees"/*-pristine "$trees"/*-patched; do names+=("$(basename "$tree")"); done
c2_trees=()
for name in "${names[@]}"; do
  if [ -f "$trees/$name/sglang/kernels/jit/csrc/deepseek_v4/c2.cuh" ]; then c2_trees+=("$name"); fi
done
if [ -n "$v41_only" ]; then
  [ ${#c2_trees[@]} -gt 0 ] || { echo "no tree in $trees has c2.cuh (sglang 0.5.23)" >&2; exit 2; }
  names=()
fi
# Builds in parallel (nvcc is the slow part), then the checks one tree at a time.
for name in "${names[@]}"; do
  (
    "${check[@]}" plan --tree "$trees/$name" --state "${name#*-}" --build "$build/$name" \
      --json "$out/plan-$name.json" &&
    "${check[@]}" store --tree "$trees/$name" --state "${name#*-}" --build "$build/$name" \
      --json "$out/store-$name.json"
  ) > "$out/check-$name.log" 2>&1 &
done
for name in "${c2_trees[@]}"; do
  "${check[@]}" c2 --tree "$trees/$name" --state "${name#*-}" --build "$build/c2-$name" \
    --json "$out/c2-$name.json" > "$out/check-c2-$name.log" 2>&1 &
done
wait
for name in "${names[@]}"; do echo "-- $name"; tail -3 "$out/check-$name.log"; done
for name in "${c2_trees[@]}"; do echo "-- c2 $name"; tail -3 "$out/check-c2-$name.log"; done
help=$(compute-sanitizer --help 2>&1)
if grep -q -- '--kernel-name' <<<"$help"; then only=--kernel-name; else only=--filter; fi
for name in "${c2_trees[@]}"; do
  timeout 600 compute-sanitizer --tool racecheck "$only" kns=flash_c2 \
    "${check[@]}" c2 --tree "$trees/$name" --state "${name#*-}" --build "$build/c2-$name" \
    > "$out/racecheck-c2-$name.log" 2>&1
  echo "== c2 $name: $(grep -h SUMMARY "$out/racecheck-c2-$name.log" | tr '\n' ' ')"
done
# Without padding between allocations a write before the cache lands in another live
# allocation and memcheck sees nothing wrong (the guard-byte check in `store` still does).
padding=()
if grep -q -- '--padding' <<<"$help"; then padding=(--padding 1048576); fi
for name in "${names[@]}"; do
  timeout 300 compute-sanitizer --tool racecheck "$only" kns=plan_compress_prefill_kernel0 \
    "${check[@]}" race --state "${name#*-}" --tree "$trees/$name" --build "$build/$name" \
    > "$out/racecheck-$name.log" 2>&1
  for kernel in flashmla indexer; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck \
      "${padding[@]}" "$only" kns=fused_store_$kernel \
      "${check[@]}" store --standalone --kernel "$kernel" --state "${name#*-}" --tree "$trees/$name" \
      --build "$build/$name" > "$out/memcheck-$kernel-$name.log" 2>&1
  done
  echo "== $name: $(grep -h SUMMARY "$out/racecheck-$name.log" | tr '\n' ' ')" \
    "flashmla: $(grep -h 'ERROR SUMMARY' "$out/memcheck-flashmla-$name.log" | head -1)" \
    "indexer: $(grep -h 'ERROR SUMMARY' "$out/memcheck-indexer-$name.log" | head -1)"
done
reports=()
for f in "$out"/plan-*.json "$out"/store-*.json "$out"/c2-*.json; do [ -f "$f" ] && reports+=("$f"); done
"${check[@]}" report "${reports[@]}" > "$out/summary.md"
cat "$out/summary.md"
} 2>&1 | tee "$out/run.log"
rm -rf "$build"
