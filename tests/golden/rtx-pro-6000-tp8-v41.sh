# Golden: recipes/rtx-pro-6000-tp8-v41.yaml rendered as in its compose service.
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
  --served-model-name deepseek-ai/DeepSeek-V4.1-Flash \
  --tp-size 8 \
  --ep-size 8 \
  --kv-cache-dtype fp8_e4m3 \
  --moe-runner-backend flashinfer_mxfp4 \
  --disable-custom-all-reduce \
  --mem-fraction-static 0.72 \
  --max-running-requests 16 \
  --cuda-graph-max-bs-decode 16 \
  --chunked-prefill-size 2048 \
  --disable-flashinfer-autotune \
  --trust-remote-code \
  --reasoning-parser deepseek-v41 \
  --tool-call-parser deepseekv41 \
  --enable-metrics \
  --enable-cache-report \
  --speculative-algorithm DSPARK \
  --speculative-dspark-block-size 6 \
  --host 0.0.0.0 \
  --port 30000
