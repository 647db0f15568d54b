"""Test pictures with one known answer, drawn and PNG-encoded here (standard library only).

verify's image check asks the server to count shapes of one colour in a picture it
draws itself: filled circles and squares of a few plain colours, well apart, on
white. Each scene has exactly one correct count, which any working vision tower
reads at temperature 0. The PNG is written with zlib and struct (8-bit RGB, one
IDAT), so the check needs no imaging library; tests decode it with Pillow.
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass

COLOURS = {
    "red": (220, 30, 30),
    "blue": (30, 60, 220),
    "green": (30, 160, 60),
}
WHITE = (255, 255, 255)


@dataclass(frozen=True)
class Shape:
    kind: str  # circle | square
    colour: str
    x: int  # centre
    y: int
    r: int  # radius, or half the side


@dataclass(frozen=True)
class Scene:
    name: str
    width: int
    height: int
    shapes: tuple[Shape, ...]
    colour: str  # what the question counts
    kind: str

    def answer(self) -> int:
        return sum(1 for s in self.shapes if (s.colour, s.kind) == (self.colour, self.kind))

    @property
    def question(self) -> str:
        return (
            f"How many {self.colour} {self.kind}s are in this picture? Count only filled "
            f"{self.colour} {self.kind}s. Reply with exactly one line of the form "
            "ANSWER: <integer> and nothing else."
        )


def _row(
    count: int, y: int, kind: str, colour: str, start: int = 48, step: int = 96, r: int = 28
) -> list[Shape]:
    return [Shape(kind, colour, start + i * step, y, r) for i in range(count)]


SCENES = (
    Scene(
        "three-red-circles",
        512,
        256,
        (*_row(3, 70, "circle", "red"), *_row(2, 190, "square", "blue")),
        "red",
        "circle",
    ),
    Scene(
        "five-blue-squares",
        512,
        256,
        (*_row(5, 70, "square", "blue"), *_row(1, 190, "circle", "red")),
        "blue",
        "square",
    ),
    Scene(
        "two-green-circles",
        384,
        384,
        (
            *_row(2, 80, "circle", "green"),
            *_row(3, 200, "square", "red"),
            *_row(1, 320, "square", "green"),
        ),
        "green",
        "circle",
    ),
)


def pixels(scene: Scene) -> list[bytearray]:
    rows = [bytearray(bytes(WHITE) * scene.width) for _ in range(scene.height)]
    for shape in scene.shapes:
        colour = bytes(COLOURS[shape.colour])
        for y in range(max(0, shape.y - shape.r), min(scene.height, shape.y + shape.r + 1)):
            for x in range(max(0, shape.x - shape.r), min(scene.width, shape.x + shape.r + 1)):
                inside = (
                    shape.kind == "square" or (x - shape.x) ** 2 + (y - shape.y) ** 2 <= shape.r**2
                )
                if inside:
                    rows[y][3 * x : 3 * x + 3] = colour
    return rows


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png(scene: Scene) -> bytes:
    raw = b"".join(b"\x00" + bytes(row) for row in pixels(scene))  # filter type 0 per row
    header = struct.pack(">IIBBBBB", scene.width, scene.height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def data_url(scene: Scene) -> str:
    return "data:image/png;base64," + base64.b64encode(png(scene)).decode("ascii")


def message(scene: Scene) -> dict:
    """The user message: the question and the picture as an OpenAI image_url part."""
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": scene.question},
            {"type": "image_url", "image_url": {"url": data_url(scene)}},
        ],
    }
