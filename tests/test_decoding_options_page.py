"""docs/decoding-options.md lists every search method and decoding option the
decoders register, each once, and nothing they do not have."""

import re
from pathlib import Path

from keras_attention.decoders.runtime_options import FIXED_OPTIONS, RUNTIME_OPTIONS
from keras_attention.decoding import processors, strategies

PAGE = Path(__file__).resolve().parents[1] / "docs" / "decoding-options.md"


def first_column_names(text, heading):
    """The backticked names in the first column of the table under `heading`."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])]


def test_the_page_lists_every_method_and_option_once():
    text = PAGE.read_text()
    methods = first_column_names(text, "Search methods")
    assert sorted(methods) == sorted(f'method="{name}"' for name in strategies.registered())
    options = first_column_names(text, "Options")
    call_inputs = {cls.call_input for cls in processors.registered().values() if cls.call_input}
    expected = (set(RUNTIME_OPTIONS) | set(FIXED_OPTIONS) | call_inputs) - {"method"}
    assert len(options) == len(set(options)), "an option listed twice"
    assert set(options) == expected
    # A run-time option says so, and only those do.
    for row in text.split("## Options\n", 1)[1].split("\n## ", 1)[0].splitlines():
        if row.startswith("| `"):
            names = re.findall(r"`([^`]+)`", row.split("|")[1])
            assert ("(run-time" in row.split("|")[1]) == all(name in RUNTIME_OPTIONS for name in names), row
