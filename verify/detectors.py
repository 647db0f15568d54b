"""Degeneration detectors: is this output a repetition loop or word salad?

Each works on one channel's text (content, reasoning or tool arguments, run
separately) and says whether it fired, with the figure it measured. The
thresholds below were calibrated on healthy outputs that are repetitive by
nature (code, markdown tables, numbered lists, JSON) and on degenerate samples
(tests/unit/test_detectors.py holds both sets; docs/verify.md the figures).

- repeating tail: the smallest period of the text's tail (KMP failure function
  on the reversed tail); fires when a primitive unit with a letter or digit and
  two distinct visible characters repeats >= MIN_REPEATS times over
  >= MIN_SPAN characters. Rules like `----`, `====` or `|---|---|` never fire.
- distinct trigrams: unique word trigrams / all word trigrams (1 - seq-rep-3).
- distinct words: unique / all words in the least varied 100-word window
  (distinct-1); catches babble from a handful of tokens (word salad).
- compression ratio: len(bytes) / len(zlib(bytes)) as Whisper uses it, taken
  on the most compressible 500-character window: on whole texts Whisper's 2.4
  fires on a third of healthy code (docs/verify.md has the figures).
- duplicate lines: repeated non-trivial lines / non-trivial lines.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

TAIL_CHARS = 2000
CLOSERS = " \t\r\n\"'`}])>"
MIN_REPEATS = 4
MIN_SPAN = 40
MIN_TRIGRAMS = 60          # below this the trigram ratio says nothing
MIN_TRIGRAM_RATIO = 0.45
COMPRESS_WINDOW = 500      # chars; the ratio of the most compressible window
MAX_COMPRESSION_RATIO = 5.0
WORD_WINDOW = 100          # words; distinct words in the least varied window
MIN_DISTINCT_WORDS = 0.15
MIN_LINES = 8
MIN_LINE_CHARS = 12        # shorter lines (`}`, `end`, `---`) repeat in healthy text
MAX_DUPLICATE_LINE_RATIO = 0.5

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Finding:
    detector: str
    fired: bool
    value: float | None
    threshold: float
    detail: str = ""

    def __str__(self) -> str:
        value = "n/a" if self.value is None else f"{self.value:.3g}"
        return f"{self.detector}={value} (limit {self.threshold:g}){': ' + self.detail if self.detail else ''}"


def prefix_function(s: str) -> list[int]:
    """KMP failure function: pi[i] = length of the longest proper prefix of
    s[:i+1] that is also its suffix."""
    pi = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = pi[k - 1]
        if s[i] == s[k]:
            k += 1
        pi[i] = k
    return pi


def _unit_counts(unit: str) -> bool:
    visible = {c for c in unit if not c.isspace()}
    return len(visible) >= 2 and any(c.isalnum() for c in unit)


def repeating_tail(text: str, min_repeats: float = MIN_REPEATS, min_span: int = MIN_SPAN) -> Finding:
    """The longest periodic run ending the text, by its smallest period.

    Closing quotes, brackets and whitespace are dropped from the end first: a
    loop inside a tool argument still ends its JSON with `"}`, and the loop is
    what comes before.
    """
    tail = text.rstrip(CLOSERS)[-TAIL_CHARS:]
    s = tail[::-1]
    best: tuple[int, int] | None = None  # (span, period)
    if s:
        pi = prefix_function(s)
        for length in range(1, len(s) + 1):
            period = length - pi[length - 1]
            if length >= min_span and length / period >= min_repeats:
                if _unit_counts(s[:period]):
                    best = (length, period)
    if best is None:
        return Finding("repeating_tail", False, 0.0, min_repeats)
    span, period = best
    unit = s[:period][::-1]
    return Finding("repeating_tail", True, span / period, min_repeats,
                   f"{unit!r} x{span / period:.1f} over {span} chars")


def distinct_trigram_ratio(text: str) -> Finding:
    words = [w.lower() for w in _WORD.findall(text)]
    trigrams = list(zip(words, words[1:], words[2:]))
    if len(trigrams) < MIN_TRIGRAMS:
        return Finding("distinct_trigrams", False, None, MIN_TRIGRAM_RATIO, "too short")
    ratio = len(set(trigrams)) / len(trigrams)
    return Finding("distinct_trigrams", ratio < MIN_TRIGRAM_RATIO, ratio, MIN_TRIGRAM_RATIO,
                   f"{len(set(trigrams))}/{len(trigrams)} distinct")


def _window_starts(length: int, window: int) -> list[int]:
    """Starts of half-overlapping windows that cover a sequence to its very end."""
    starts = list(range(0, length - window + 1, window // 2))
    if starts[-1] != length - window:
        starts.append(length - window)
    return starts


def _ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def compression_ratio(text: str) -> Finding:
    if len(text) < COMPRESS_WINDOW:
        return Finding("compression_ratio", False, None, MAX_COMPRESSION_RATIO, "too short")
    ratio, at = max((_ratio(text[i:i + COMPRESS_WINDOW]), i)
                    for i in _window_starts(len(text), COMPRESS_WINDOW))
    return Finding("compression_ratio", ratio > MAX_COMPRESSION_RATIO, ratio,
                   MAX_COMPRESSION_RATIO, f"window at char {at}")


def distinct_words(text: str) -> Finding:
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < WORD_WINDOW:
        return Finding("distinct_words", False, None, MIN_DISTINCT_WORDS, "too short")
    ratio, at = min((len(set(words[i:i + WORD_WINDOW])) / WORD_WINDOW, i)
                    for i in _window_starts(len(words), WORD_WINDOW))
    return Finding("distinct_words", ratio < MIN_DISTINCT_WORDS, ratio, MIN_DISTINCT_WORDS,
                   f"window at word {at}")


def duplicate_line_ratio(text: str) -> Finding:
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if len(ln) >= MIN_LINE_CHARS]
    if len(lines) < MIN_LINES:
        return Finding("duplicate_lines", False, None, MAX_DUPLICATE_LINE_RATIO, "too few lines")
    ratio = 1 - len(set(lines)) / len(lines)
    return Finding("duplicate_lines", ratio > MAX_DUPLICATE_LINE_RATIO, ratio,
                   MAX_DUPLICATE_LINE_RATIO, f"{len(lines) - len(set(lines))}/{len(lines)} repeated")


DETECTORS = (repeating_tail, distinct_trigram_ratio, distinct_words, compression_ratio,
             duplicate_line_ratio)


def analyse(text: str) -> list[Finding]:
    return [detector(text) for detector in DETECTORS]


def degenerate(text: str) -> list[Finding]:
    """The detectors that fired on text (empty: it looks healthy)."""
    return [f for f in analyse(text) if f.fired]
