"""The stand-in layer both tracks share is cached by its tag (tests/support/standin.py,
`shared_image`): a cached image is reused only while every input it is made of
is the same. Each input changed on its own must give another tag, so the image
is built afresh rather than an old one reused (issue 44: a cache never hides a
change)."""

from __future__ import annotations

from tests.support import standin

OS = "sm12x-standin-os:0123456789abcdef"
PINS = {"torch": "2.13.0", "triton": "3.8.0"}


def test_the_shared_layer_s_key_is_stable():
    assert standin.shared_key(OS, dict(PINS)) == standin.shared_key(OS, dict(PINS))


def test_each_input_of_the_shared_layer_changes_its_key(monkeypatch):
    before = standin.shared_key(OS, PINS)
    changed = {
        "torch pin": standin.shared_key(OS, {**PINS, "torch": "2.13.1"}),
        "triton pin": standin.shared_key(OS, {**PINS, "triton": "3.8.1"}),
        "OS layer": standin.shared_key("sm12x-standin-os:fedcba9876543210", PINS),
    }
    monkeypatch.setattr(standin, "SHARED_DOCKERFILE", standin.SHARED_DOCKERFILE + "# edited\n")
    changed["its Dockerfile"] = standin.shared_key(OS, PINS)
    monkeypatch.undo()
    monkeypatch.setattr(standin, "RECIPE_VERSION", standin.RECIPE_VERSION + "x")
    changed["the recipe version"] = standin.shared_key(OS, PINS)
    assert all(key != before for key in changed.values()), changed
    assert len(set(changed.values())) == len(changed)


def test_the_shared_pins_are_the_test_environment_s():
    # What versions.env pins for the CPU test environment, on every track.
    from sm12x.versions import load_versions, tracks

    for track in tracks():
        pins = load_versions(track)
        assert standin.shared_pins() == {
            "torch": pins["TEST_TORCH_VERSION"],
            "triton": pins["TEST_TRITON_VERSION"],
        }


# A track's stand-in (standin.image_key): the same rule for each of its inputs.
HOUSE, REQS = "wheels-0123456789abcdef", ["fastapi", "transformers==5.3.0"]


def test_each_input_of_a_track_s_stand_in_changes_its_key(monkeypatch, tmp_path):
    def key(**kw):
        args = {"os_tag": OS, "house": HOUSE, "layout": "venv", "requirements": REQS}
        return standin.image_key(**{**args, "uv_version": "0.13.9", **kw})

    before = key()
    assert key() == before
    changed = {
        "the layers below": key(os_tag="sm12x-standin-shared:fedcba9876543210"),
        "the wheelhouse": key(house="wheels-fedcba9876543210"),
        "the shape": key(layout="system"),
        "sglang's requirements": key(requirements=[*REQS, "uvicorn"]),
        "the uv that installs it": key(uv_version="0.13.10"),
    }
    monkeypatch.setattr(standin, "DOCKERFILE", standin.DOCKERFILE.replace("--compile", "--c"))
    changed["its Dockerfile"] = key()
    monkeypatch.undo()
    helper = tmp_path / "fake_cuobjdump"
    helper.write_text(standin.FAKE_CUOBJDUMP.read_text() + "# edited\n")
    monkeypatch.setattr(standin, "FAKE_CUOBJDUMP", helper)
    changed["the fake cuobjdump"] = key()
    monkeypatch.undo()
    monkeypatch.setattr(standin, "RECIPE_VERSION", standin.RECIPE_VERSION + "x")
    changed["the recipe version"] = key()
    assert all(k != before for k in changed.values()), changed
    assert len(set(changed.values())) == len(changed)
