ARG OS_IMAGE
FROM ${OS_IMAGE}
ARG SHAPE
ARG PREBAKED
ARG VENV_BIN
# pinned (system): pip into /usr/local/lib/python3.X/dist-packages past Debian's
# PEP 668 marker. current (venv): a virtualenv at /opt/sglang, first on PATH.
# /usr/local/cuda/bin: where the CUDA base keeps cuobjdump (here, a fake one).
ENV PATH=${VENV_BIN}/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The venv sees the shared layer's torch and Triton in the system Python
# (standin.py, SHARED); everything else of the closure goes into it.
RUN if [ "$SHAPE" = venv ]; then python3 -m venv --system-site-packages /opt/sglang; fi
# Installed by uv (the host's TEST_UV_VERSION binary, bind-mounted; standin.py's
# docstring says why): the same files and bytecode as pip's install, in a fraction of
# pip's time; the scheme is pip's (uv mirrors it, Debian's posix_local included).
# Hard links from uv's throwaway unpack folder (--no-cache: removed when uv ends)
# instead of a second copy of every file; uv copies where it cannot link.
RUN --mount=type=bind,source=wheels,target=/tmp/wheels \
    --mount=type=bind,source=uv,target=/tmp/uv \
    /tmp/uv pip install --python "$(command -v python3)" --break-system-packages \
      --offline --no-index --no-deps --no-cache --link-mode=hardlink --compile-bytecode \
      /tmp/wheels/*.whl
COPY checkout /sgl-workspace/sglang
# As sglang's Dockerfile: an editable install of the checkout, no dependencies.
RUN python3 -m pip install --break-system-packages --root-user-action=ignore \
      --disable-pip-version-check --no-index --no-deps --no-build-isolation \
      -e /sgl-workspace/sglang/python \
 && rm -rf /sgl-workspace/sglang/python/build
COPY fake_cuobjdump /usr/local/cuda/bin/cuobjdump
RUN mkdir -p "/root/.cache/$(dirname "$PREBAKED")" \
 && echo "prebaked by the stand-in base" > "/root/.cache/$PREBAKED" && chmod 700 /root
WORKDIR /sgl-workspace/sglang
CMD ["/bin/bash"]
