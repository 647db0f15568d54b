"""The stand-in model's eyes: it reads the picture it is sent, as a vision tower would.

Asked "How many <colour> <kind>s ...", it decodes each image (a data: URL, the form
verify and OpenAI clients send) with Pillow, finds the blobs of that colour (4-
connected regions of pixels close to it) and tells circles from squares by how much
of its bounding box a blob fills (a square fills all of it, a circle about pi/4).
So a picture that does not arrive, or arrives changed, gives another count, and
the image-check fault (`image-blind`: the tower's features never reach the model)
answers without looking.
"""

from __future__ import annotations

import base64
import io
import re

_QUESTION = re.compile(r"how many (\w+) (circle|square)s", re.IGNORECASE)
_COLOURS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 160, 60)}


def images_of(content) -> list[str]:
    """The image URLs of a message's content parts."""
    if not isinstance(content, list):
        return []
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if isinstance(url, str):
                urls.append(url)
    return urls


def _decode(url: str):
    from PIL import Image

    head, _, data = url.partition(",")
    if not head.startswith("data:image/") or ";base64" not in head:
        raise ValueError("the stand-in reads data: URLs only")
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def blobs(image, colour: tuple[int, int, int], tolerance: int = 40) -> list[tuple[int, int]]:
    """(pixel count, bounding-box area) of each 4-connected region of `colour`."""
    width, height = image.size
    pixels = image.load()
    near = [
        [all(abs(a - b) <= tolerance for a, b in zip(pixels[x, y], colour)) for x in range(width)]
        for y in range(height)
    ]
    seen = [[False] * width for _ in range(height)]
    found = []
    for y0 in range(height):
        for x0 in range(width):
            if not near[y0][x0] or seen[y0][x0]:
                continue
            stack, count = [(x0, y0)], 0
            seen[y0][x0] = True
            xs, ys = [x0, x0], [y0, y0]
            while stack:
                x, y = stack.pop()
                count += 1
                xs[0], xs[1], ys[0], ys[1] = (
                    min(xs[0], x),
                    max(xs[1], x),
                    min(ys[0], y),
                    max(ys[1], y),
                )
                for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                    if 0 <= nx < width and 0 <= ny < height and near[ny][nx] and not seen[ny][nx]:
                        seen[ny][nx] = True
                        stack.append((nx, ny))
            found.append((count, (xs[1] - xs[0] + 1) * (ys[1] - ys[0] + 1)))
    return found


def count(image, colour: str, kind: str) -> int:
    fills = [pixels / box for pixels, box in blobs(image, _COLOURS[colour]) if pixels >= 20]
    if kind == "square":
        return sum(1 for f in fills if f > 0.92)
    return sum(1 for f in fills if 0.6 < f <= 0.92)


def answer(question: str, urls: list[str], *, blind: bool = False) -> str:
    match = _QUESTION.search(question)
    if match is None or match.group(1).lower() not in _COLOURS:
        return "I see the picture, but the question does not say what to count."
    if blind:
        return "ANSWER: 1"  # what a model guesses when the tower's features are missing
    colour, kind = match.group(1).lower(), match.group(2).lower()
    return f"ANSWER: {sum(count(_decode(url), colour, kind) for url in urls)}"
