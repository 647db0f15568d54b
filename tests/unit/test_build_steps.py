"""tests/support/build_steps.py reads BuildKit's plain progress log; the image
tests assert reuse and invalidation from it (a step CACHED or run), so it must
tell them apart, keep interleaved steps apart, and time a failed step. The log
below is cut from a real build of this Dockerfile (the 20.10 CLI's format)."""

from __future__ import annotations

from tests.support import build_steps

LOG = """\
#8 [base 4/4] RUN python3 /opt/sm12x/scripts/image-build check-base --sglang "0.5.17"
#8 sha256:5590b2a59fde557e84434ec3b33c588a71f4e0745952073e92dc530aa8142589
#8 CACHED

#9 [stack 1/2] RUN --mount=type=cache,id=sm12x-pip,target=/root/.cache/pip     python3 /opt/sm12x/scripts/image-build install-flashinfer --part python       --version "0.7.2"
#9 0.671 image-build: $ pip install --no-deps --force-reinstall flashinfer-python==0.7.2
#9 3.155   Downloading flashinfer_python-0.7.2-py3-none-any.whl (65.2 MB)

#19 [wheel 6/6] RUN --mount=type=cache,id=sm12x-pip,target=/root/.cache/pip     python3 -m pip wheel --no-deps --wheel-dir /dist /src
#19 2.10 Processing /src

#9 [stack 1/2] RUN --mount=type=cache,id=sm12x-pip,target=/root/.cache/pip     python3 /opt/sm12x/scripts/image-build install-flashinfer --part python       --version "0.7.2"
#9 5.157 Installing collected packages: flashinfer-python
#9 DONE 82.5s

#19 DONE 15.9s

#21 [selftest 1/1] RUN mkdir -p /opt/sm12x/selftest  && python3 -m sm12x.selftest
#21 41.70 sm12x dispatch self-test FAILED: the patch found no usable flashinfer tables
#21 ERROR: executor failed running [/bin/bash -o pipefail -c mkdir -p]: exit code: 1

#23 exporting to image
#23 exporting layers 3.0s done
#23 DONE 3.0s
"""


def test_steps_are_told_apart_cached_run_and_failed():
    steps = {s.number: s for s in build_steps.parse(LOG)}
    assert steps[8].cached and not steps[8].failed
    assert steps[8].name.startswith("[base 4/4] RUN python3 /opt/sm12x/scripts/image-build")
    # Step 9's output came in two pieces around step 19's: one step, its own time.
    assert not steps[9].cached and steps[9].seconds == 82.5
    assert "install-flashinfer --part python" in steps[9].name
    assert steps[9].installing_at == 5.157
    assert steps[19].seconds == 15.9 and steps[19].installing_at is None
    # No DONE for a failed step: its last output's time.
    assert steps[21].failed and steps[21].seconds == 41.7
    assert steps[23].name == "exporting to image" and steps[23].seconds == 3.0


def test_the_summary_names_each_step_s_state():
    rows = build_steps.summary(build_steps.parse(LOG))
    assert any("FAILED [selftest 1/1]" in row for row in rows)
    assert any("(pip installing from 5 s)" in row for row in rows)
    assert rows[-1].strip().startswith("143.1 s total")
