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

Repetition statistics do not see wrong tokens in fluent text. Three more
detectors look at what the tokens are (docs/verify.md has their calibration):

- broken UTF-8: U+FFFD replacement characters (a multi-byte character cut
  between tokens and decoded alone), lone surrogates, and mojibake (UTF-8
  read as Latin-1/cp1252, judged by ftfy's badness heuristic).
- script switch: letters of a writing system the prompt did not use (a Han
  or Cyrillic token inside an English answer: a wrong row of DeepSeek's
  multilingual vocabulary). Greek runs of one or two letters (pi, mu, Delta
  in maths and units) are allowed.
- non-words: the share of prose words that no English word list knows
  (wordfreq), in the worst window of words; code, identifiers, acronyms and
  anything in backticks are left out, so salad made of non-words fires and
  technical prose does not.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from functools import lru_cache

import ftfy.badness
import regex

TAIL_CHARS = 2000
CLOSERS = " \t\r\n\"'`}])>"
MIN_REPEATS = 4
MIN_SPAN = 40
MIN_TRIGRAMS = 60  # below this the trigram ratio says nothing
MIN_TRIGRAM_RATIO = 0.45
COMPRESS_WINDOW = 500  # chars; the ratio of the most compressible window
MAX_COMPRESSION_RATIO = 5.0
WORD_WINDOW = 100  # words; distinct words in the least varied window
MIN_DISTINCT_WORDS = 0.15
MIN_LINES = 8
MIN_LINE_CHARS = 12  # shorter lines (`}`, `end`, `---`) repeat in healthy text
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


def repeating_tail(
    text: str, min_repeats: float = MIN_REPEATS, min_span: int = MIN_SPAN
) -> Finding:
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
            if length >= min_span and length / period >= min_repeats and _unit_counts(s[:period]):
                best = (length, period)
    if best is None:
        return Finding("repeating_tail", False, 0.0, min_repeats)
    span, period = best
    unit = s[:period][::-1]
    return Finding(
        "repeating_tail",
        True,
        span / period,
        min_repeats,
        f"{unit!r} x{span / period:.1f} over {span} chars",
    )


def distinct_trigram_ratio(text: str) -> Finding:
    words = [w.lower() for w in _WORD.findall(text)]
    trigrams = list(zip(words, words[1:], words[2:]))
    if len(trigrams) < MIN_TRIGRAMS:
        return Finding("distinct_trigrams", False, None, MIN_TRIGRAM_RATIO, "too short")
    ratio = len(set(trigrams)) / len(trigrams)
    return Finding(
        "distinct_trigrams",
        ratio < MIN_TRIGRAM_RATIO,
        ratio,
        MIN_TRIGRAM_RATIO,
        f"{len(set(trigrams))}/{len(trigrams)} distinct",
    )


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
    ratio, at = max(
        (_ratio(text[i : i + COMPRESS_WINDOW]), i)
        for i in _window_starts(len(text), COMPRESS_WINDOW)
    )
    return Finding(
        "compression_ratio",
        ratio > MAX_COMPRESSION_RATIO,
        ratio,
        MAX_COMPRESSION_RATIO,
        f"window at char {at}",
    )


def distinct_words(text: str) -> Finding:
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < WORD_WINDOW:
        return Finding("distinct_words", False, None, MIN_DISTINCT_WORDS, "too short")
    ratio, at = min(
        (len(set(words[i : i + WORD_WINDOW])) / WORD_WINDOW, i)
        for i in _window_starts(len(words), WORD_WINDOW)
    )
    return Finding(
        "distinct_words",
        ratio < MIN_DISTINCT_WORDS,
        ratio,
        MIN_DISTINCT_WORDS,
        f"window at word {at}",
    )


def duplicate_line_ratio(text: str) -> Finding:
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if len(ln) >= MIN_LINE_CHARS]
    if len(lines) < MIN_LINES:
        return Finding("duplicate_lines", False, None, MAX_DUPLICATE_LINE_RATIO, "too few lines")
    ratio = 1 - len(set(lines)) / len(lines)
    return Finding(
        "duplicate_lines",
        ratio > MAX_DUPLICATE_LINE_RATIO,
        ratio,
        MAX_DUPLICATE_LINE_RATIO,
        f"{len(lines) - len(set(lines))}/{len(lines)} repeated",
    )


# --- what the tokens are -------------------------------------------------------

REPLACEMENT = "\ufffd"


def broken_utf8(text: str) -> Finding:
    """U+FFFD, lone surrogates (JSON can carry them; UTF-8 cannot) and mojibake."""
    bad = text.count(REPLACEMENT)
    detail = f"{bad} U+FFFD" if bad else ""
    surrogates = sum(0xD800 <= ord(c) <= 0xDFFF for c in text)
    if surrogates:
        bad += surrogates
        detail = f"{surrogates} lone surrogate(s)"
    if not bad and ftfy.badness.is_bad(text):
        bad = ftfy.badness.badness(text)
        match = _MOJIBAKE.search(text)
        detail = "mojibake" + (
            f" near {text[max(0, match.start() - 20) : match.end() + 20]!r}" if match else ""
        )
    elif bad:
        at = next(i for i, c in enumerate(text) if c == REPLACEMENT or 0xD800 <= ord(c) <= 0xDFFF)
        detail += f" at char {at}: {_around(text, at)!r}"
    return Finding("broken_utf8", bad > 0, float(bad), 0, detail)


# UTF-8 lead bytes read as Latin-1/cp1252: only used to point at the spot.
_MOJIBAKE = re.compile("[\u00c2\u00c3\u00e2][\u0080-\u00bf\u2018-\u203a\u20ac\u0152\u0153]")

# Letters of any script but those every English answer may use.
_FOREIGN = regex.compile(r"[\p{L}--[\p{Latin}\p{Common}\p{Inherited}]]+", regex.V1)
_GREEK = regex.compile(r"\p{Script=Greek}+")
MAX_GREEK_RUN = 2  # pi, mu, Delta x in maths and units
_SCRIPTS = (
    "Greek",
    "Cyrillic",
    "Han",
    "Hiragana",
    "Katakana",
    "Hangul",
    "Arabic",
    "Hebrew",
    "Thai",
    "Devanagari",
    "Armenian",
    "Georgian",
)
_SCRIPT_OF = [(name, regex.compile(rf"\p{{Script={name}}}")) for name in _SCRIPTS]


def _script(ch: str) -> str:
    return next((name for name, pattern in _SCRIPT_OF if pattern.match(ch)), "other")


def script_switch(text: str) -> Finding:
    """Letters of a script an English prompt's answer has no reason to use."""
    foreign = [
        m
        for m in _FOREIGN.finditer(text)
        if not (_GREEK.fullmatch(m.group()) and len(m.group()) <= MAX_GREEK_RUN)
    ]
    letters = sum(len(m.group()) for m in foreign)
    if not foreign:
        return Finding("script_switch", False, 0.0, 0)
    first = foreign[0]
    scripts = sorted({_script(m.group()[0]) for m in foreign})
    return Finding(
        "script_switch",
        True,
        float(letters),
        0,
        f"{'/'.join(scripts)} letters at char {first.start()}: {_around(text, first.start())!r}",
    )


def _around(text: str, at: int, width: int = 24) -> str:
    return text[max(0, at - width) : at + width]


NONWORD_WINDOW = 40  # prose words; the worst window counts
MIN_PROSE_WORDS = 20  # fewer than this says nothing
MAX_NONWORD_RATIO = 0.5
MIN_WORD_LENGTH = 3
_CODE = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.S)
_URL = re.compile(r"\S+://\S+")
_PROSE_WORD = regex.compile(r"^\p{L}[\p{Ll}]+(?:['\u2019]\p{Ll}+)?$")
_STRIP = "\"'()[]{}<>,.;:!?*_~|"


def prose_words(text: str) -> list[str]:
    """The words a word list can judge: lower-case after an optional capital,
    letters only (code, identifiers, numbers, acronyms, paths and anything in
    backticks are left out); hyphenated words count part by part."""
    text = _URL.sub(" ", _CODE.sub(" ", text))
    words = []
    for token in text.split():
        for part in re.split(r"[-\u2013\u2014/]", token.strip(_STRIP)):
            part = part.strip(_STRIP)
            if len(part) >= MIN_WORD_LENGTH and _PROSE_WORD.match(part):
                words.append(part.lower())
    return words


@lru_cache(maxsize=65536)
def known_word(word: str, lang: str = "en") -> bool:
    from wordfreq import zipf_frequency  # its list loads on first use (~0.5 s)

    return zipf_frequency(word, lang) > 0


def nonwords(text: str) -> Finding:
    words = prose_words(text)
    if len(words) < MIN_PROSE_WORDS:
        return Finding("nonwords", False, None, MAX_NONWORD_RATIO, "too few prose words")
    unknown = [not known_word(w) for w in words]
    window = min(NONWORD_WINDOW, len(words))
    ratio, at = max(
        (sum(unknown[i : i + window]) / window, i) for i in _window_starts(len(words), window)
    )
    sample = [w for w, u in zip(words[at : at + window], unknown[at : at + window]) if u][:6]
    return Finding(
        "nonwords",
        ratio > MAX_NONWORD_RATIO,
        ratio,
        MAX_NONWORD_RATIO,
        f"{sum(unknown[at : at + window])}/{window} unknown from word {at}: {' '.join(sample)}",
    )


DETECTORS = (
    repeating_tail,
    distinct_trigram_ratio,
    distinct_words,
    compression_ratio,
    duplicate_line_ratio,
    broken_utf8,
    script_switch,
    nonwords,
)


def analyse(text: str) -> list[Finding]:
    return [detector(text) for detector in DETECTORS]


def degenerate(text: str) -> list[Finding]:
    """The detectors that fired on text (empty: it looks healthy)."""
    return [f for f in analyse(text) if f.fired]
