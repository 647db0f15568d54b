"""The vision tower works: pictures verify draws itself, each with one right count.

Runs where the recipe serves a vision tower (DeepSeek-V4.1-Flash with
`model.vision: true`) or `--vision` asks for it. Each scene of verify/images.py
goes as a data: URL in an OpenAI `image_url` content part, thinking off,
temperature 0, and the reply must be the one line `ANSWER: <count>`. A server that
refuses the image (sglang answers 400 for media input to a model that is not
multimodal), or counts wrong, fails: the tower is missing, not loaded, or the
images do not reach it.
"""

from __future__ import annotations

import re

import openai

from verify import images
from verify.client import explain
from verify.context import Context
from verify.result import Evidence

_ANSWER = re.compile(r"^\s*ANSWER:\s*(-?\d+)\s*$")
NOT_SEEN_CAUSE = (
    "the server does not serve a vision tower, or the images do not reach it: a "
    "text-only checkpoint or line, the vision weights not loaded, or a processor "
    "that drops the picture"
)
NOT_SEEN_FIX = (
    "serve a recipe with model.vision: true (DeepSeek-V4.1-Flash) from the full "
    "checkpoint; `sm12x doctor` checks its config has the vision tower"
)


def image(ctx: Context, ev: Evidence) -> None:
    for scene in images.SCENES:
        body = ctx.payload(
            [images.message(scene)],
            max_tokens=32,
            extra_body={"chat_template_kwargs": {"thinking": False}},
        )
        try:
            response = ctx.client.chat.completions.create(**body)
        except openai.BadRequestError as exc:
            ev.saw(f"{scene.name}: HTTP 400: {str(exc)[:200]}")
            ev.fail(
                f"the server refused an image input ({scene.name}): {str(exc)[:160]}",
                NOT_SEEN_CAUSE,
                NOT_SEEN_FIX,
            )
        except Exception as exc:  # noqa: BLE001 - explain() names the cause
            raise explain(exc, f"image check ({scene.name})") from None
        content = (response.choices[0].message.content or "").strip()
        want = scene.answer()
        match = _ANSWER.match(content)
        ev.saw(
            f"{scene.name}: asked for the {scene.colour} {scene.kind}s ({want}), got "
            f"{content[:80]!r}"
        )
        if match is None:
            ev.fail(
                f"{scene.name}: the reply is not one 'ANSWER: <integer>' line: {content[:120]!r}",
                "the model did not follow the pinned format, or did not see the picture",
                NOT_SEEN_FIX,
            )
        if int(match.group(1)) != want:
            ev.fail(
                f"{scene.name}: counted {match.group(1)} {scene.colour} {scene.kind}s, the "
                f"picture has {want}",
                NOT_SEEN_CAUSE,
                NOT_SEEN_FIX,
            )
    ev.metrics["images"] = len(images.SCENES)
