# docker buildx bake: the image for linux/amd64 and linux/arm64.
#
#   docker buildx bake image-amd64 --load      # one arch, into the local daemon
#   docker buildx bake image --push            # both arches under one tag (QEMU for
#                                              # the foreign one: slow; CI builds each
#                                              # arch on its own runner instead)
#
# Every variable can be set from the environment. CI exports them all from
# versions.env with `scripts/image-args --format env >> "$GITHUB_ENV"`; the
# defaults repeat versions.env so a plain `bake` builds the pinned image, and
# tests/unit/test_image_files.py proves each default equals what image-args
# computes. The Dockerfile writes the OCI labels from these arguments (so a
# plain `docker build` gets them too); bake adds the creation time.

variable "BASE_IMAGE" { default = "lmsysorg/sglang:v0.5.17-cu130-runtime" }
# Empty until scripts/pin-digests resolves it (see versions.env).
variable "BASE_IMAGE_DIGEST" { default = "" }
variable "SGLANG_VERSION" { default = "0.5.17" }
variable "FLASHINFER_VERSION" { default = "0.6.15.post1" }
variable "FLASHINFER_CUBIN_VERSION" { default = "0.6.15.post1" }
variable "FLASHINFER_JIT_CACHE_VERSION" { default = "0.6.15.post1" }
variable "FLASHINFER_JIT_CACHE_VERSION_AMD64" { default = "" }
variable "FLASHINFER_JIT_CACHE_VERSION_ARM64" { default = "" }
variable "FLASHINFER_CUBIN_INDEX_URL" { default = "https://flashinfer.ai/whl" }
variable "FLASHINFER_JIT_CACHE_INDEX_URL" { default = "https://flashinfer.ai/whl/cu130" }
variable "CUDA_VERSION" { default = "13.0" }
variable "SGLANG_ROUTER_VERSION" { default = "0.3.2" }
variable "SM12X_VERSION" { default = "0.1.0" }
variable "FLASHINFER_PREBUILT" { default = "1" }
variable "SM12X_PATCHES" { default = "0001-sm120-sparse-mla-topk-dispatch.patch,0002-dsml-stream-partial-json-value.patch,0003-dsml-stream-failure-keeps-markup-out.patch,0004-dsml-stream-preamble.patch,0005-tool-stream-end-releases-held-text.patch,0006-dsml-stream-block-whitespace.patch,0007-dsml-text-after-block.patch,0008-dsml-string-values-verbatim.patch,0010-dsv4-prompt-tools-as-sent.patch,0011-dspark-swa-eviction.patch,0020-dsv4-compress-plan-verify-rows.patch,0021-dsv4-compress-plan-barrier.patch,0022-dsv4-kv-store-skip-invalid-index.patch" }
# The commit (CI: github.sha).
variable "SM12X_REVISION" { default = "unknown" }
# Placeholder owner until the project's repository is known (docs/image.md).
variable "SM12X_SOURCE" { default = "https://github.com/sm12x/sm12x" }
variable "IMAGE_REPO" { default = "ghcr.io/sm12x/sm12x" }
# RFC 3339; CI sets the commit's time so rebuilds of a commit label alike.
# null: no label (bake leaves a label whose value is null to the Dockerfile).
variable "CREATED" { default = null }

group "default" {
  targets = ["image"]
}

target "_common" {
  context    = "."
  dockerfile = "Dockerfile"
  target     = "runtime"
  args = {
    BASE_IMAGE                         = BASE_IMAGE
    BASE_IMAGE_DIGEST                  = BASE_IMAGE_DIGEST
    SGLANG_VERSION                     = SGLANG_VERSION
    FLASHINFER_VERSION                 = FLASHINFER_VERSION
    FLASHINFER_CUBIN_VERSION           = FLASHINFER_CUBIN_VERSION
    FLASHINFER_JIT_CACHE_VERSION       = FLASHINFER_JIT_CACHE_VERSION
    FLASHINFER_JIT_CACHE_VERSION_AMD64 = FLASHINFER_JIT_CACHE_VERSION_AMD64
    FLASHINFER_JIT_CACHE_VERSION_ARM64 = FLASHINFER_JIT_CACHE_VERSION_ARM64
    FLASHINFER_CUBIN_INDEX_URL         = FLASHINFER_CUBIN_INDEX_URL
    FLASHINFER_JIT_CACHE_INDEX_URL     = FLASHINFER_JIT_CACHE_INDEX_URL
    CUDA_VERSION                       = CUDA_VERSION
    SGLANG_ROUTER_VERSION              = SGLANG_ROUTER_VERSION
    SM12X_VERSION                      = SM12X_VERSION
    FLASHINFER_PREBUILT                = FLASHINFER_PREBUILT
    SM12X_PATCHES                      = SM12X_PATCHES
    SM12X_REVISION                     = SM12X_REVISION
    SM12X_SOURCE                       = SM12X_SOURCE
  }
  labels = { "org.opencontainers.image.created" = CREATED }
  # The project version, the sglang version and the commit (as scripts/image-args).
  tags = [
    "${IMAGE_REPO}:${SM12X_VERSION}",
    "${IMAGE_REPO}:sglang-${SGLANG_VERSION}",
    "${IMAGE_REPO}:sha-${substr(SM12X_REVISION, 0, 12)}",
  ]
}

target "image-amd64" {
  inherits  = ["_common"]
  platforms = ["linux/amd64"]
}

target "image-arm64" {
  inherits  = ["_common"]
  platforms = ["linux/arm64"]
}

target "image" {
  inherits  = ["_common"]
  platforms = ["linux/amd64", "linux/arm64"]
}
