# Golden: recipes/dgx-spark-tp2.yaml rendered as in its compose service, node 0.
# Regenerate with scripts/regen; review the diff.
SGLANG_DEFAULT_THINKING=1 \
SGLANG_JIT_DEEPGEMM_PRECOMPILE=0 \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
TORCH_CUDA_ARCH_LIST=12.1a \
NCCL_NET=IB \
NCCL_IB_DISABLE=0 \
NCCL_IB_HCA=rocep1s0f0 \
NCCL_SOCKET_IFNAME=enp1s0f0np0 \
GLOO_SOCKET_IFNAME=enp1s0f0np0 \
NCCL_IB_GID_INDEX=3 \
NCCL_IB_ROCE_VERSION_NUM=2 \
NCCL_CUMEM_ENABLE=0 \
NCCL_IGNORE_CPU_AFFINITY=1 \
NCCL_NVLS_ENABLE=0 \
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
  --tp-size 2 \
  --kv-cache-dtype fp8_e4m3 \
  --moe-runner-backend flashinfer_mxfp4 \
  --mem-fraction-static 0.75 \
  --weight-loader-drop-cache-after-load \
  --context-length 327680 \
  --cuda-graph-max-bs-decode 32 \
  --max-running-requests 32 \
  --disable-flashinfer-autotune \
  --trust-remote-code \
  --reasoning-parser deepseek-v4 \
  --tool-call-parser deepseekv4 \
  --enable-metrics \
  --enable-cache-report \
  --speculative-algorithm DSPARK \
  --speculative-dspark-block-size 4 \
  --nnodes 2 \
  --node-rank 0 \
  --dist-init-addr 192.168.100.1:5000 \
  --host 127.0.0.1 \
  --port 30000
