#!/usr/bin/env bash
# Compact verify near the context limit on a GPU, under compute-sanitizer memcheck
# (issue 48; patch 0025). The CPU proof is tests/patch/test_context_limit.py.
#
# The same probe (tests/patch/context_limit_probe.py) with SM12X_PROBE_DEVICE=cuda:
# each tree's verify metadata chain and its metadata kernels compiled by Triton, with
# exact allocations (no guard region: memcheck is the guard, and PyTorch's caching
# allocator is off so each tensor is its own allocation). Pristine is expected to
# report invalid global reads past req_to_token (the pool's last row); patched none.
#
#   benchmarks/dsv4_context_limit_gpu.sh --prepare DEST     # here: slim trees + spec
#   benchmarks/dsv4_context_limit_gpu.sh --run DEST OUT     # GPU machine: python3 with torch and triton
#
# The modules the probe loads import, besides torch and triton: msgspec, orjson,
# pybase64, pyzmq, apache-tvm-ffi, starlette, pydantic (and its core), dill (what a
# PyTorch image lacked, 2026-12-06): install them from wheels into a folder and name
# it in SITE (SITE=/tmp/site benchmarks/dsv4_context_limit_gpu.sh --run ...). The four
# trees are about 60 MB: under a 64 MiB transfer limit, carry one version per call.
#
# --prepare needs this checkout's .cache/venv and the sglang wheels in .cache/wheels;
# it copies to DEST only the files of each tree the probe loads (found by running it
# once on the CPU with no case), so DEST travels small.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.cache/venv/bin/python}

prepare() {
  # Absolute: the copies below run from inside each unpacked tree.
  mkdir -p "$1"
  dest=$(cd "$1" && pwd)
  cp "$here/tests/patch/context_limit_probe.py" "$dest/probe.py"
  (cd "$here" && "$py" -c "
import json, sys
from tests.patch.test_context_limit import cases
print(json.dumps({'cases': cases(), 'clean': False}))") > "$dest/spec.json"
  for v in 0.5.17 0.5.23; do
    for state in pristine patched; do
      full=$(mktemp -d)
      (cd "$full" && unzip -q "$here"/.cache/wheels/sglang-$v-*.whl)
      if [ $state = patched ]; then
        "$py" "$here/scripts/apply-patches" --site-packages "$full" > /dev/null
      fi
      overlay=$(cd "$here" && "$py" -c "
from sm12x.mock import wheels; import os; print(os.pathsep.join(wheels.pythonpath('$v')))")
      files=$(cd "$full" && TRITON_INTERPRET=1 PYTHONWARNINGS=ignore \
        PYTHONPATH="$overlay:$full:$here" "$py" "$here/tests/patch/context_limit_probe.py" \
        '{"cases": [], "imports": true}')
      out="$dest/sglang-$v-$state"
      rm -rf "$out"
      (cd "$full" && "$py" -c "
import json, os, shutil, sys
out = sys.argv[1]
for rel in json.loads(sys.argv[2]):
    os.makedirs(os.path.join(out, os.path.dirname(rel)), exist_ok=True)
    shutil.copy2(rel, os.path.join(out, rel))
" "$out" "$files")
      cp -r "$full"/sglang-*.dist-info "$out/"
      # What the traced import-only run does not load: the modules the kernels import
      # lazily, and the JIT sources' folders (sglang.kernels.jit checks they exist).
      (cd "$full" && find sglang/kernels sglang/srt/speculative sglang/srt/layers/attention/dsv4 \
        -name '*.py' | while read -r f; do
          mkdir -p "$out/$(dirname "$f")"; cp -n "$f" "$out/$f"; done)
      cp -r "$full"/sglang/kernels/jit/include "$full"/sglang/kernels/jit/csrc "$out/sglang/kernels/jit/"
      # sglang/__init__.py imports the frontend language (IPython among its needs): the
      # probe needs none of it.
      : > "$out/sglang/__init__.py"
      rm -rf "$full"
      echo "prepared $out ($(du -sh "$out" | cut -f1))"
    done
  done
}

run() {
  mkdir -p "$2"
  dest=$(cd "$1" && pwd) out=$(cd "$2" && pwd)
  spec=$(cat "$dest/spec.json")
  for tree in "$dest"/sglang-*-pristine "$dest"/sglang-*-patched; do
    name=$(basename "$tree")
    set +e
    (cd "$tree" && SM12X_PROBE_DEVICE=cuda PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      PYTHONPATH="$tree:$here${SITE:+:$SITE}" compute-sanitizer --tool memcheck \
      --error-exitcode 9 --print-limit 20 --log-file "$out/$name.memcheck.log" \
      python3 "$dest/probe.py" "$spec" > "$out/$name.json" 2> "$out/$name.stderr.log")
    rc=$?
    set -e
    echo "$name: exit $rc, $(grep -c 'Invalid __global__ read' "$out/$name.memcheck.log" || true) invalid global reads reported; $(grep 'ERROR SUMMARY' "$out/$name.memcheck.log" || echo 'no summary')"
  done
}

case "${1:-}" in
  --prepare) prepare "${2:?--prepare DEST}" ;;
  --run) run "${2:?--run DEST OUT}" "${3:?--run DEST OUT}" ;;
  *) echo "usage: $0 --prepare DEST | --run DEST OUT" >&2; exit 2 ;;
esac
