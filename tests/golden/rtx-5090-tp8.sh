# Golden: recipes/rtx-5090-tp8.yaml rendered as in its compose service.
# Regenerate with scripts/regen; review the diff.
SGLANG_DEFAULT_THINKING=1 \
SGLANG_JIT_DEEPGEMM_PRECOMPILE=0 \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
SGLANG_RAGGED_VERIFY_MODE=static \
XDG_CACHE_HOME=/cache \
FLASHINFER_WORKSPACE_BASE=/cache \
TRITON_CACHE_DIR=/cache/triton \
TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor \
SGLANG_DG_CACHE_DIR=/cache/deep_gemm \
TVM_FFI_CACHE_DIR=/cache/tvm-ffi \
SGLANG_JIT_CACHE_DIR=/cache/sglang-jit \
CUDA_CACHE_PATH=/cache/nv \
python3 -m sm12x.keyed sglang.launch_server \
  --model-path /model \
  --served-model-name deepseek-ai/DeepSeek-V4-Flash-0731 \
  --tp-size 8 \
  --kv-cache-dtype fp8_e4m3 \
  --moe-runner-backend flashinfer_mxfp4 \
  --mem-fraction-static 0.92 \
  --chunked-prefill-size 4096 \
  --cuda-graph-max-bs-decode 8 \
  --max-running-requests 48 \
  --disable-flashinfer-autotune \
  --trust-remote-code \
  --reasoning-parser deepseek-v4 \
  --tool-call-parser deepseekv4 \
  --enable-metrics \
  --enable-cache-report \
  --speculative-algorithm DSPARK \
  --speculative-dspark-block-size 4 \
  --host 0.0.0.0 \
  --port 30000
