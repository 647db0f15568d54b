"""The hardware-result issue form asks for what `sm12x bench` writes: every
`result.json: PATH` its fields name resolves in the result's JSON Schema, so a
renamed or removed result field breaks this test rather than the form."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FORM = ROOT / ".github" / "ISSUE_TEMPLATE" / "hardware-result.yml"
SCHEMA = json.loads((ROOT / "sm12x" / "bench" / "result.schema.json").read_text())


def _resolve(schema: dict, parts: list[str]) -> dict:
    node = schema
    for part in parts:
        many = part.endswith("[]")
        name = part[:-2] if many else part
        node = _deref(node)
        props = node.get("properties", {})
        assert name in props, f"{name!r} not in {sorted(props)}"
        node = _deref(props[name])
        if many:
            assert node.get("type") == "array", f"{name} is not a list"
            node = _deref(node["items"])
    return node


def _deref(node: dict) -> dict:
    if "$ref" in node:
        return _deref(SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]])
    for key in ("anyOf", "oneOf"):
        if key in node:  # a field that may be null: the non-null branch
            kinds = [_deref(n) for n in node[key] if n.get("type") != "null"]
            return kinds[0] if kinds else node
    return node


def paths() -> list[str]:
    form = yaml.safe_load(FORM.read_text())
    found = []
    for field in form["body"]:
        text = (field.get("attributes") or {}).get("description", "")
        if "result.json:" in text:
            found += re.findall(r"[\w\[\]]+(?:\.[\w\[\]]+)+|\b\w+\b", text.split("result.json:")[1])
    return [p for p in found if p != "and"]


def test_the_form_is_a_github_issue_form():
    form = yaml.safe_load(FORM.read_text())
    assert {"name", "description", "body"} <= set(form)
    ids = [f["id"] for f in form["body"] if f["type"] != "markdown"]
    assert len(ids) == len(set(ids)), ids
    for field in form["body"]:
        assert field["type"] in {"markdown", "input", "textarea", "dropdown", "checkboxes"}


def test_every_result_path_the_form_names_is_in_the_result_schema():
    named = paths()
    assert {"recipe.name", "environment.gpus", "runs[].metrics.output_tokens_per_s"} <= set(named)
    for path in named:
        _resolve(SCHEMA, path.split("."))


def test_a_path_the_result_does_not_have_is_caught():
    with pytest.raises(AssertionError, match="output_throughput"):
        _resolve(SCHEMA, ["runs[]", "metrics", "output_throughput"])
