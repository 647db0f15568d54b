# sm12x: sglang + its flashinfer + sm12x's patch series for that sglang + the
# launcher, for linux/amd64 (RTX PRO 6000, RTX 5090) and linux/arm64 (DGX Spark).
# One image per track (versions.env SM12X_TRACKS; docs/tracks.md).
#
#   docker buildx bake image-amd64          # the default track; or image-arm64, image (both)
#   docker buildx bake image-current-amd64  # the current track (sglang 0.5.23)
#   docker build -t sm12x .                 # plain BuildKit, default track, this machine's arch
#   docker build $(scripts/image-args --track current --format flags) -t sm12x:current .
#
# Every default below repeats versions.env's default track (tests/unit/
# test_image_files.py proves they are equal); bake, CI and scripts/image-args
# pass them from there, for any track.
# No `# syntax=` line: the build must not pull a frontend image. docs/image.md
# explains each stage and what the build refuses.

# --- Build arguments (defaults = versions.env) --------------------------------------
ARG BASE_IMAGE=lmsysorg/sglang:v0.5.17-cu130-runtime
# Empty until scripts/pin-digests resolves it; then FROM uses tag@digest.
ARG BASE_IMAGE_DIGEST=
ARG SGLANG_VERSION=0.5.17
ARG FLASHINFER_VERSION=0.6.15.post1
ARG FLASHINFER_CUBIN_VERSION=0.6.15.post1
ARG FLASHINFER_JIT_CACHE_VERSION=0.6.15.post1
# Per-arch jit-cache versions, where they differ (empty: the one above).
ARG FLASHINFER_JIT_CACHE_VERSION_AMD64=
ARG FLASHINFER_JIT_CACHE_VERSION_ARM64=
ARG FLASHINFER_CUBIN_INDEX_URL=https://flashinfer.ai/whl
ARG FLASHINFER_JIT_CACHE_INDEX_URL=https://flashinfer.ai/whl/cu130
ARG CUDA_VERSION=13.0
ARG SGLANG_ROUTER_VERSION=0.3.2
ARG SM12X_VERSION=0.1.0
# The track these pins are (the image's label and SM12X_TRACK inside it).
ARG SM12X_TRACK=pinned
# 1: install flashinfer-cubin and flashinfer-jit-cache (flashinfer's own index).
# 0: python package only; kernels compile at first use (the CI stand-in build,
# which cannot reach flashinfer's index; see docs/image.md).
ARG FLASHINFER_PREBUILT=1
# The patches apply-patches must apply for SGLANG_VERSION (the image's label;
# the build fails if it is not what was applied; empty where patches.toml's
# rule retires every patch). scripts/image-args computes it.
ARG SM12X_PATCHES=0001-sm120-sparse-mla-topk-dispatch.patch,0002-dsml-stream-partial-json-value.patch,0003-dsml-stream-failure-keeps-markup-out.patch,0004-dsml-stream-preamble.patch,0005-tool-stream-end-releases-held-text.patch,0006-dsml-stream-block-whitespace.patch,0007-dsml-text-after-block.patch,0008-dsml-string-values-verbatim.patch,0010-dsv4-prompt-tools-as-sent.patch,0011-dspark-swa-eviction.patch,0020-dsv4-compress-plan-verify-rows.patch,0021-dsv4-compress-plan-barrier.patch,0022-dsv4-kv-store-skip-invalid-index.patch,0024-dsv4-compact-verify-compressor-widths.patch,0025-dsv4-verify-padding-rows-within-row.patch
ARG SM12X_REVISION=unknown
# Placeholder owner until the project's repository is known (see docs/image.md).
ARG SM12X_SOURCE=https://github.com/sm12x/sm12x

# --- base: the sglang image this one extends ---------------------------------------
FROM ${BASE_IMAGE}${BASE_IMAGE_DIGEST:+@}${BASE_IMAGE_DIGEST} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG SGLANG_VERSION
COPY scripts/image-build /opt/sm12x/scripts/image-build
COPY sm12x/gpucode/check.py /opt/sm12x/scripts/kernel_check.py
# Nothing from the OS archive: apply-patches applies the series itself when the
# base has no `patch` (sglang's images do not promise it).
RUN python3 /opt/sm12x/scripts/image-build check-base --sglang "${SGLANG_VERSION}"

# --- wheel: the sm12x package, built from this checkout ----------------------------
FROM base AS wheel
COPY pyproject.toml README.md versions.env /src/
COPY sm12x /src/sm12x
COPY verify /src/verify
COPY recipes /src/recipes
COPY patches /src/patches
RUN --mount=type=cache,id=sm12x-pip,target=/root/.cache/pip \
    --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && python3 -m pip wheel --no-deps --wheel-dir /dist /src

# --- stack: the pinned flashinfer over sglang's own pin -----------------------------
FROM base AS stack
ARG FLASHINFER_VERSION
ARG TARGETARCH
# flashinfer-python first, on its own: this layer depends on FLASHINFER_VERSION
# (and the base) only, so a build that changes only the prebuilt kernels or
# their index (FLASHINFER_PREBUILT, the *_INDEX_URL) reuses it. The other
# arguments are declared after it for that reason.
RUN --mount=type=cache,id=sm12x-pip,target=/root/.cache/pip \
    --mount=type=secret,id=pip-ca \
    python3 /opt/sm12x/scripts/image-build install-flashinfer --part python \
      --version "${FLASHINFER_VERSION}" --targetarch "${TARGETARCH}" \
      --pip-ca /run/secrets/pip-ca
ARG FLASHINFER_CUBIN_VERSION
ARG FLASHINFER_JIT_CACHE_VERSION
ARG FLASHINFER_JIT_CACHE_VERSION_AMD64
ARG FLASHINFER_JIT_CACHE_VERSION_ARM64
ARG FLASHINFER_CUBIN_INDEX_URL
ARG FLASHINFER_JIT_CACHE_INDEX_URL
ARG CUDA_VERSION
ARG FLASHINFER_PREBUILT
RUN --mount=type=cache,id=sm12x-pip,target=/root/.cache/pip \
    --mount=type=secret,id=pip-ca \
    python3 /opt/sm12x/scripts/image-build install-flashinfer --part kernels \
      --version "${FLASHINFER_VERSION}" \
      --cubin-version "${FLASHINFER_CUBIN_VERSION}" \
      --jit-cache-version "${FLASHINFER_JIT_CACHE_VERSION}" \
      --jit-cache-version-amd64 "${FLASHINFER_JIT_CACHE_VERSION_AMD64}" \
      --jit-cache-version-arm64 "${FLASHINFER_JIT_CACHE_VERSION_ARM64}" \
      --cubin-index "${FLASHINFER_CUBIN_INDEX_URL}" \
      --jit-cache-index "${FLASHINFER_JIT_CACHE_INDEX_URL}" \
      --cuda "${CUDA_VERSION}" --targetarch "${TARGETARCH}" \
      --prebuilt "${FLASHINFER_PREBUILT}" --pip-ca /run/secrets/pip-ca \
 && python3 /opt/sm12x/scripts/image-build check-kernels --targetarch "${TARGETARCH}" \
      --required "${FLASHINFER_PREBUILT}"

# --- patched: the dispatch patch, applied by the one mechanism -----------------------
FROM stack AS patched
ARG SGLANG_VERSION
ARG SM12X_PATCHES
# The wrapper loads sm12x/patches from beside its folder, as in the checkout:
# the standard-library modules that apply the series, before sm12x is installed.
COPY scripts/apply-patches /opt/sm12x/scripts/apply-patches
COPY sm12x/patches/__init__.py sm12x/patches/apply.py sm12x/patches/rules.py \
     sm12x/patches/swap.py sm12x/patches/unified.py /opt/sm12x/sm12x/patches/
COPY patches/sglang /opt/sm12x/patches/sglang
RUN python3 /opt/sm12x/scripts/apply-patches \
 && python3 /opt/sm12x/scripts/image-build check-patches \
      --sglang "${SGLANG_VERSION}" --expect "${SM12X_PATCHES}" \
 && python3 /opt/sm12x/scripts/image-build compile-bytecode

# --- app: sm12x and sglang-router in sglang's own Python -----------------------------
FROM patched AS app
ARG SM12X_VERSION
ARG SGLANG_ROUTER_VERSION
RUN --mount=type=cache,id=sm12x-pip,target=/root/.cache/pip \
    --mount=type=secret,id=pip-ca \
    --mount=type=bind,from=wheel,source=/dist,target=/tmp/sm12x-dist \
    python3 /opt/sm12x/scripts/image-build install-app --wheels /tmp/sm12x-dist \
      --sm12x-version "${SM12X_VERSION}" --router-version "${SGLANG_ROUTER_VERSION}" \
      --pip-ca /run/secrets/pip-ca \
 && python3 /opt/sm12x/scripts/image-build compile-bytecode --check-only

# --- selftest: the hermetic dispatch self-test, no GPU ------------------------------
# Its own stage so its caches and bytecode stay out of the image; the runtime
# stage copies its report, which makes the build run it (and fail with it).
FROM app AS selftest
# (Inherited from base; repeated so a reader and hadolint see the pipefail.)
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN mkdir -p /opt/sm12x/selftest \
 && python3 -m sm12x.selftest --json /opt/sm12x/selftest/report.json 2>&1 \
    | tee /opt/sm12x/selftest/report.txt

# --- runtime -------------------------------------------------------------------------
FROM app AS runtime
ARG BASE_IMAGE
ARG BASE_IMAGE_DIGEST
ARG SGLANG_VERSION
ARG FLASHINFER_VERSION
ARG FLASHINFER_PREBUILT
ARG SM12X_VERSION
ARG SM12X_TRACK
ARG SM12X_PATCHES
ARG SM12X_REVISION
ARG SM12X_SOURCE
COPY --from=selftest /opt/sm12x/selftest /opt/sm12x/selftest

# The JIT and compile caches, all on the cache volume; the same paths
# `sm12x launch` sets from SM12X_CACHE_DIR (sm12x/launch/render.py CACHE_ENV),
# here too for anything started without the launcher.
ENV SM12X_CACHE_DIR=/cache \
    HF_HOME=/cache/huggingface \
    XDG_CACHE_HOME=/cache \
    FLASHINFER_WORKSPACE_BASE=/cache \
    TRITON_CACHE_DIR=/cache/triton \
    TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor \
    SGLANG_DG_CACHE_DIR=/cache/deep_gemm \
    CUDA_CACHE_PATH=/cache/nv \
    TVM_FFI_CACHE_DIR=/cache/tvm-ffi \
    SGLANG_JIT_CACHE_DIR=/cache/sglang-jit \
    HOME=/home/sm12x \
    PYTHONUNBUFFERED=1 \
    SM12X_TRACK=${SM12X_TRACK}

# A non-root user in group 0 (OpenShift-style: any UID in group 0 can run it).
# The cache volume (compose mounts it at /cache) is group-writable and setgid,
# so a new named volume inherits ownership and mode from the image's /cache.
# What the base prebaked under /root/.cache (invisible to this user) is copied
# under /cache first; then every cache is proven writable as uid 10001.
RUN useradd --uid 10001 --gid 0 --home-dir /home/sm12x --create-home \
      --shell /usr/sbin/nologin sm12x \
 && mkdir -p /cache/huggingface /cache/triton /cache/torchinductor /cache/deep_gemm /cache/nv \
      /cache/tvm-ffi /cache/sglang-jit \
 && chown -R 10001:0 /cache /home/sm12x \
 && chmod -R g=u /cache /home/sm12x \
 && find /cache /home/sm12x -type d -exec chmod g+s {} + \
 && cubins="$(python3 -c 'import importlib.util as u; s = u.find_spec("flashinfer_cubin"); \
print(s.submodule_search_locations[0] if s else "")')" \
 && if [ -n "${cubins}" ] && [ -d "${cubins}/cubins" ]; then chmod -R g+w "${cubins}/cubins"; fi \
 && python3 /opt/sm12x/scripts/image-build runtime-caches --adopt --uid 10001 --gid 0 \
 && python3 /opt/sm12x/scripts/image-build runtime-caches --uid 4242 --gid 0

LABEL org.opencontainers.image.title="sm12x" \
      org.opencontainers.image.description="DeepSeek-V4-Flash-0731 with SGLang and DSpark on sm_120/sm_121 (RTX PRO 6000, RTX 5090, DGX Spark)" \
      org.opencontainers.image.source="${SM12X_SOURCE}" \
      org.opencontainers.image.revision="${SM12X_REVISION}" \
      org.opencontainers.image.version="${SM12X_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_IMAGE_DIGEST}" \
      sm12x.sglang.version="${SGLANG_VERSION}" \
      sm12x.flashinfer.version="${FLASHINFER_VERSION}" \
      sm12x.flashinfer.prebuilt="${FLASHINFER_PREBUILT}" \
      sm12x.track="${SM12X_TRACK}" \
      sm12x.sglang-router.version="${SGLANG_ROUTER_VERSION}" \
      sm12x.sglang-router.source="pypi, replacing the base's own (/opt/sm12x/build/router.txt)" \
      sm12x.patches="${SM12X_PATCHES}"

USER 10001:0
WORKDIR /home/sm12x
EXPOSE 30000
# One real generated token (not /health). Timings as in compose.yaml: a cold
# DGX Spark takes up to about two hours to load.
HEALTHCHECK --interval=60s --timeout=60s --start-period=2h --retries=5 \
  CMD ["sm12x", "healthcheck"]
ENTRYPOINT ["sm12x", "launch"]
