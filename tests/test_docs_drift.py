"""Hand-written figures in the docs match the measured ones (the rule: tests/doc_numbers.py).

docs/benchmarks.md and docs/reliability.md: every figure in the prose is in the same document's
generated tables (the result files are not committed; the tables rendered from them are). The
README's GPU claims: every figure in its GPU sentences that cite docs/gpu.md is in docs/gpu.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_numbers import drifts

REPO = Path(__file__).resolve().parents[1]

# Phrases whose numbers are settings or limits, not measured figures.
ALLOWED: dict[str, tuple[str, ...]] = {
    "benchmarks.md": (
        "the last 512 KiB",  # the preview's tail: a setting of vega_tui/preview.py
        "logs of 4 MiB or more",  # where the preview starts: the same file's setting
        "head (64 KiB",  # the preview's head: the same file's setting
        "6.5e-5",  # a tolerance the mel tests assert
    ),
    "reliability.md": (
        "at most 200 bytes",  # a limit the profile model enforces
        "201 bytes",  # a bad-input case: one byte over that limit
        "every 3,000 steps",  # the soak's settings
        "240 MiB a minute",  # the leak the soak's negative control injects
    ),
}
README_GPU_ALLOWED: tuple[str, ...] = ()


def shown(found: list) -> str:
    return "\n".join(f"  line {d.line}: {d.figure!r} in: {d.text}" for d in found)


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_prose_figures_are_in_the_rendered_results(name: str) -> None:
    text = (REPO / "docs" / name).read_text(encoding="utf-8")
    found = drifts(text, ALLOWED[name])
    assert not found, f"docs/{name}: prose figures that no rendered result holds:\n{shown(found)}"


def test_an_edited_prose_figure_is_caught() -> None:
    # Negative control: one prose figure changed in a copy of the document.
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    prose, _, rest = text.partition("<!-- bench:results:start -->")
    _, _, after = rest.partition("<!-- bench:results:end -->")
    assert not drifts(text, ALLOWED["benchmarks.md"])
    edited = text.replace(after, re.sub(r"0\.908", "0.918", after, count=1))
    assert edited != text
    found = drifts(edited, ALLOWED["benchmarks.md"])
    assert [d.figure for d in found] == ["0.918"]
    # A figure in a code span is a command's setting, not a claim: changing it is not drift.
    coded = after.replace("`bench/run_all`", "`bench/run_all --minutes 99.5`", 1)
    coded = text.replace(after, coded)
    assert not drifts(coded, ALLOWED["benchmarks.md"])


def readme_gpu_claims(readme: str) -> str:
    """The README's sentences about a GPU in its paragraphs that cite docs/gpu.md."""
    paragraphs = [p for p in re.split(r"\n\s*\n", readme) if "docs/gpu.md" in p]
    sentences = (s for p in paragraphs for s in re.split(r"(?<=[.;])\s+(?=[A-Z])", p))
    return "\n".join(s for s in sentences if "GPU" in s or "gpu" in s)


def test_readme_gpu_claims_match_docs_gpu() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    gpu = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    claims = readme_gpu_claims(readme)
    assert "samples/s" in claims  # the README states a measured GPU figure
    # docs/gpu.md is generated as a whole: its table is the record.
    doc = f"{claims}\n<!-- bench:results:start -->\n{gpu}\n<!-- bench:results:end -->\n"
    found = drifts(doc, README_GPU_ALLOWED)
    assert not found, f"README.md: GPU figures that docs/gpu.md does not hold:\n{shown(found)}"
    # A row the check missed is not claimed as working: the README says why it missed.
    if "real CUDA OOM: recoveries before the step fit | 0 |" in gpu:
        assert "known bench bug" in claims and "known bench bug" in gpu.lower()
    edited = claims.replace("51.64", "61.64")  # negative control: a figure docs/gpu.md lacks
    assert [d.figure for d in drifts(doc.replace(claims, edited), README_GPU_ALLOWED)] == ["61.64"]


def missed_sections(doc: str) -> set[str]:
    """Section numbers with a missed target in "Targets at a glance" (negative controls left out)."""
    rows = re.findall(r"^\| (\d+)\. [^|]*\|[^|]*\|[^|]*\| ([^|]*) \| \*\*no\*\* \|$", doc, re.M)
    return {number for number, target in rows if "negative control" not in target}


def test_the_analysis_names_every_missed_target() -> None:
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    intro = text.partition("## What limits the figures")[2].partition("\n### ")[0]
    named = set(re.findall(r"section (\d+)", intro))
    assert missed_sections(text) <= named, f"missed targets the analysis does not name: {missed_sections(text)}"
    assert not re.search(r"(?<!not )every target is met", intro.lower())
    # Negative control: a miss added to a section the analysis does not name.
    row = "| 8. Speaking speed (synth) | batch: sentences per second, Griffin-Lim included | 18.22 /s | >= 10/s |"
    extra = text.replace(f"{row} yes |", f"{row} **no** |")
    assert extra != text and "8" in missed_sections(extra) - named
