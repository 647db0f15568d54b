# docker buildx bake: the image of each track, for linux/amd64 and linux/arm64.
#
#   docker buildx bake image-amd64 --load          # the default track (pinned), one arch
#   docker buildx bake image-current-amd64 --load  # the current track (sglang 0.5.23)
#                                                  # (image-<track>-<arch> for every track)
#   docker buildx bake image --push                # both arches under one tag (QEMU for
#                                                  # the foreign one: slow; CI builds each
#                                                  # arch on its own runner instead)
#   docker buildx bake all                         # every track, both arches
#
# Every variable can be set from the environment. CI exports them all from
# versions.env with `scripts/image-args --format bake >> "$GITHUB_ENV"`. A
# track's own pins carry versions.env's names (<TRACK>_<KEY>); the shared ones
# their plain names. The defaults repeat versions.env so a plain `bake` builds
# the pinned images, and tests/unit/test_image_files.py proves each default
# equals what image-args computes, and that each track's target passes the
# Dockerfile every build argument. The Dockerfile writes the OCI labels from
# these arguments (so a plain `docker build` gets them too); bake adds the
# creation time.

# --- Shared by every track ---
variable "FLASHINFER_CUBIN_INDEX_URL" { default = "https://flashinfer.ai/whl" }
variable "FLASHINFER_JIT_CACHE_INDEX_URL" { default = "https://flashinfer.ai/whl/cu130" }
variable "CUDA_VERSION" { default = "13.0" }
variable "SGLANG_ROUTER_VERSION" { default = "0.3.2" }
variable "SM12X_VERSION" { default = "0.1.0" }
variable "FLASHINFER_PREBUILT" { default = "1" }
# The commit (CI: github.sha).
variable "SM12X_REVISION" { default = "unknown" }
# Placeholder owner until the project's repository is known (docs/image.md).
variable "SM12X_SOURCE" { default = "https://github.com/sm12x/sm12x" }
variable "IMAGE_REPO" { default = "ghcr.io/sm12x/sm12x" }
# RFC 3339; CI sets the commit's time so rebuilds of a commit label alike.
# null: no label (bake leaves a label whose value is null to the Dockerfile).
variable "CREATED" { default = null }

# --- Track pinned ---
variable "PINNED_BASE_IMAGE" { default = "lmsysorg/sglang:v0.5.17-cu130-runtime" }
# Empty until scripts/pin-digests resolves it (see versions.env).
variable "PINNED_BASE_IMAGE_DIGEST" { default = "" }
variable "PINNED_SGLANG_VERSION" { default = "0.5.17" }
variable "PINNED_FLASHINFER_VERSION" { default = "0.6.15.post1" }
variable "PINNED_FLASHINFER_CUBIN_VERSION" { default = "0.6.15.post1" }
variable "PINNED_FLASHINFER_JIT_CACHE_VERSION" { default = "0.6.15.post1" }
variable "PINNED_FLASHINFER_JIT_CACHE_VERSION_AMD64" { default = "" }
variable "PINNED_FLASHINFER_JIT_CACHE_VERSION_ARM64" { default = "" }
# The patch series scripts/image-args computes for the track's sglang.
variable "PINNED_SM12X_PATCHES" { default = "0001-sm120-sparse-mla-topk-dispatch.patch,0002-dsml-stream-partial-json-value.patch,0003-dsml-stream-failure-keeps-markup-out.patch,0004-dsml-stream-preamble.patch,0005-tool-stream-end-releases-held-text.patch,0006-dsml-stream-block-whitespace.patch,0007-dsml-text-after-block.patch,0008-dsml-string-values-verbatim.patch,0010-dsv4-prompt-tools-as-sent.patch,0011-dspark-swa-eviction.patch,0020-dsv4-compress-plan-verify-rows.patch,0021-dsv4-compress-plan-barrier.patch,0022-dsv4-kv-store-skip-invalid-index.patch,0024-dsv4-compact-verify-compressor-widths.patch,0025-dsv4-verify-padding-rows-within-row.patch" }

# --- Track current ---
variable "CURRENT_BASE_IMAGE" { default = "lmsysorg/sglang:v0.5.23-cu130-runtime" }
# Empty until scripts/pin-digests resolves it (see versions.env).
variable "CURRENT_BASE_IMAGE_DIGEST" { default = "" }
variable "CURRENT_SGLANG_VERSION" { default = "0.5.23" }
variable "CURRENT_FLASHINFER_VERSION" { default = "0.7.2" }
variable "CURRENT_FLASHINFER_CUBIN_VERSION" { default = "0.7.2" }
variable "CURRENT_FLASHINFER_JIT_CACHE_VERSION" { default = "0.7.2" }
variable "CURRENT_FLASHINFER_JIT_CACHE_VERSION_AMD64" { default = "" }
variable "CURRENT_FLASHINFER_JIT_CACHE_VERSION_ARM64" { default = "" }
# The patch series scripts/image-args computes for the track's sglang.
variable "CURRENT_SM12X_PATCHES" { default = "0022-dsv4-kv-store-skip-invalid-index.patch,0023-dsv4-recipe-block-newlines.patch,0024-dsv4-compact-verify-compressor-widths.patch,0025-dsv4-verify-padding-rows-within-row.patch" }

group "default" {
  targets = ["image"]
}

group "all" {
  targets = ["image-pinned", "image-current"]
}

target "_common" {
  context    = "."
  dockerfile = "Dockerfile"
  target     = "runtime"
  args = {
    FLASHINFER_CUBIN_INDEX_URL         = FLASHINFER_CUBIN_INDEX_URL
    FLASHINFER_JIT_CACHE_INDEX_URL     = FLASHINFER_JIT_CACHE_INDEX_URL
    CUDA_VERSION                       = CUDA_VERSION
    SGLANG_ROUTER_VERSION              = SGLANG_ROUTER_VERSION
    SM12X_VERSION                      = SM12X_VERSION
    FLASHINFER_PREBUILT                = FLASHINFER_PREBUILT
    SM12X_REVISION                     = SM12X_REVISION
    SM12X_SOURCE                       = SM12X_SOURCE
  }
  labels = { "org.opencontainers.image.created" = CREATED }
}

# Track pinned, the default: also the bare version and commit tags
# (as scripts/image-args --track pinned).
target "_pinned" {
  inherits = ["_common"]
  args = {
    BASE_IMAGE                         = PINNED_BASE_IMAGE
    BASE_IMAGE_DIGEST                  = PINNED_BASE_IMAGE_DIGEST
    SGLANG_VERSION                     = PINNED_SGLANG_VERSION
    FLASHINFER_VERSION                 = PINNED_FLASHINFER_VERSION
    FLASHINFER_CUBIN_VERSION           = PINNED_FLASHINFER_CUBIN_VERSION
    FLASHINFER_JIT_CACHE_VERSION       = PINNED_FLASHINFER_JIT_CACHE_VERSION
    FLASHINFER_JIT_CACHE_VERSION_AMD64 = PINNED_FLASHINFER_JIT_CACHE_VERSION_AMD64
    FLASHINFER_JIT_CACHE_VERSION_ARM64 = PINNED_FLASHINFER_JIT_CACHE_VERSION_ARM64
    SM12X_PATCHES                      = PINNED_SM12X_PATCHES
    SM12X_TRACK                        = "pinned"
  }
  tags = [
    "${IMAGE_REPO}:${SM12X_VERSION}-pinned",
    "${IMAGE_REPO}:${SM12X_VERSION}",
    "${IMAGE_REPO}:sglang-${PINNED_SGLANG_VERSION}",
    "${IMAGE_REPO}:sha-${substr(SM12X_REVISION, 0, 12)}-pinned",
    "${IMAGE_REPO}:sha-${substr(SM12X_REVISION, 0, 12)}",
  ]
}

target "image-amd64" {
  inherits  = ["_pinned"]
  platforms = ["linux/amd64"]
}

target "image-arm64" {
  inherits  = ["_pinned"]
  platforms = ["linux/arm64"]
}

target "image" {
  inherits  = ["_pinned"]
  platforms = ["linux/amd64", "linux/arm64"]
}

# The same under the track's name, as every other track's (CI builds image-<track>-<arch>).
target "image-pinned-amd64" {
  inherits = ["image-amd64"]
}

target "image-pinned-arm64" {
  inherits = ["image-arm64"]
}

target "image-pinned" {
  inherits = ["image"]
}

# Track current: every tag names the track (as scripts/image-args --track current).
target "_current" {
  inherits = ["_common"]
  args = {
    BASE_IMAGE                         = CURRENT_BASE_IMAGE
    BASE_IMAGE_DIGEST                  = CURRENT_BASE_IMAGE_DIGEST
    SGLANG_VERSION                     = CURRENT_SGLANG_VERSION
    FLASHINFER_VERSION                 = CURRENT_FLASHINFER_VERSION
    FLASHINFER_CUBIN_VERSION           = CURRENT_FLASHINFER_CUBIN_VERSION
    FLASHINFER_JIT_CACHE_VERSION       = CURRENT_FLASHINFER_JIT_CACHE_VERSION
    FLASHINFER_JIT_CACHE_VERSION_AMD64 = CURRENT_FLASHINFER_JIT_CACHE_VERSION_AMD64
    FLASHINFER_JIT_CACHE_VERSION_ARM64 = CURRENT_FLASHINFER_JIT_CACHE_VERSION_ARM64
    SM12X_PATCHES                      = CURRENT_SM12X_PATCHES
    SM12X_TRACK                        = "current"
  }
  tags = [
    "${IMAGE_REPO}:${SM12X_VERSION}-current",
    "${IMAGE_REPO}:sglang-${CURRENT_SGLANG_VERSION}",
    "${IMAGE_REPO}:sha-${substr(SM12X_REVISION, 0, 12)}-current",
  ]
}

target "image-current-amd64" {
  inherits  = ["_current"]
  platforms = ["linux/amd64"]
}

target "image-current-arm64" {
  inherits  = ["_current"]
  platforms = ["linux/arm64"]
}

target "image-current" {
  inherits  = ["_current"]
  platforms = ["linux/amd64", "linux/arm64"]
}
