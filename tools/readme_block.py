"""The generated blocks of the documentation pages: text between a begin and an end marker
that a script rewrites from committed results files."""


def replace_block(text, begin, end, body, where="the page"):
    """`text` with what lies between `begin` and `end` replaced by `body`."""
    if begin not in text or end not in text:
        raise SystemExit(f"error: {where} has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"
