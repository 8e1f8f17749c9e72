"""The rule that ties hand-written figures in the docs to measured ones (tests/test_docs_drift.py).

A document's record is its generated part: the tables `bench/run_all` renders between the
`bench:results` markers from the result JSON. Its prose is everything else, less code (fenced,
indented or inline: commands and settings), link targets, dates and headings' section numbers.
A prose *figure* is a number with decimals, or any number followed by a unit (%, s, ms, min, x,
GB, MiB, steps, ...); a bare whole number is a count or a name and is not checked. Under a
"### N." heading a figure must be among section N's recorded numbers (its table and summary
rows), elsewhere among all of them, allowing for rounding: the prose may round a recorded value
to its own decimals, and a percentage may be a recorded fraction times 100. Settings written in
prose are not figures: the test's `ALLOWED` lists them, word for word, per document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

START, END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"

UNITS = (
    r"%|ms|s|min|minutes?|hours?|h|x|×|GB|GiB|MB|MiB|KB|KiB|kB|B|M|k|kHz|Hz|"
    r"steps?/s|samples/s|sentences?/s|/s|steps|seconds?|bytes?|bits?|lines?|items|pairs"
)
# A number with optional thousands commas and decimals, not part of a word or a longer number.
NUMBER = r"(?<![\w.\-/])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?"
FIGURE = re.compile(NUMBER + r"(?!\.?\d|,\d)(?:\s?(" + UNITS + r")(?![A-Za-z]))?")
ANY_NUMBER = re.compile(r"(?<![\w.])-?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(e-?\d+)?")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T[\d:+]+)?")


@dataclass(frozen=True)
class Drift:
    line: int
    figure: str
    text: str


def split(doc: str) -> tuple[str, str]:
    """(prose, record): the text outside the generated blocks (theirs blanked) and inside them."""
    prose, record = [], []
    inside = False
    for line in doc.splitlines():
        if START in line:
            inside = True
        elif END in line:
            inside = False
        (record if inside else prose).append(line)
        if inside:
            prose.append("")  # keep line numbers
    return "\n".join(prose), "\n".join(record)


def prose_lines(prose: str) -> list[tuple[int, str, str | None]]:
    """(line number, text, section) of the prose, code and headings' section numbers taken out;
    `section` is the number of the "### N." heading the line is under (None outside one)."""
    out: list[tuple[int, str, str | None]] = []
    fenced, previous, section = False, "", None
    for number, line in enumerate(prose.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        indented = line.startswith("    ") and not previous.strip()  # an indented code block
        previous = line if not indented else ""
        if fenced or indented or line.startswith("<!--"):
            continue
        if line.startswith("#"):
            heading = re.match(r"###\s+(\d+)\.", line)
            section = heading.group(1) if heading else None
        text = re.sub(r"`[^`]*`", " ", line)
        text = re.sub(r"^#+\s*\d+\.", " ", text)
        text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
        text = DATE.sub(" ", text)
        out.append((number, text, section))
    return out


def numbers(text: str) -> list[float]:
    return [float(m.group(0).replace(",", "")) for m in ANY_NUMBER.finditer(text)]


def record_values(record: str) -> dict[str | None, list[float]]:
    """The record's numbers by section ("### N." sections, summary rows "| N. ..."); None: all."""
    by_section: dict[str | None, list[float]] = {None: numbers(record)}
    section = None
    for line in record.splitlines():
        if line.startswith("#"):
            heading = re.match(r"###\s+(\d+)\.", line)
            section = heading.group(1) if heading else None
        row = re.match(r"\|\s*(\d+)\.", line)
        key = row.group(1) if row else section
        if key is not None:
            by_section.setdefault(key, []).extend(numbers(line))
    return by_section


def recorded(value: float, decimals: int, percent: bool, values: list[float]) -> bool:
    """True when `value` (as written, with `decimals` places) is some recorded value rounded."""
    half = 0.5 * 10.0**-decimals + 1e-9
    for v in values:
        for candidate in (v, v * 100) if percent else (v,):
            if abs(abs(candidate) - value) <= half:
                return True
    return False


def drifts(doc: str, allowed: tuple[str, ...] = ()) -> list[Drift]:
    """Every prose figure of `doc` that its generated part does not hold."""
    prose, record = split(doc)
    values = record_values(record)
    found = []
    for number, text, section in prose_lines(prose):
        for phrase in allowed:
            text = text.replace(phrase, " ")
        # Under "### N." a figure must be in section N's results; elsewhere anywhere in the record.
        scope = values.get(section, values[None])
        for m in FIGURE.finditer(text):
            digits, fraction, unit = m.group(1), m.group(2) or "", m.group(3)
            if not fraction and not unit:
                continue  # a bare whole number: a count or a name, not a measured figure
            value = float(digits.replace(",", "") + fraction)
            if not recorded(value, max(len(fraction) - 1, 0), unit == "%", scope):
                found.append(Drift(number, m.group(0).strip(), text.strip()[:160]))
    return found
