"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML file.

Blocks hold plain text; each renderer escapes it for its format, so a system name, a
label or a path from a result folder can never inject Markdown or HTML: `md_escape` and
`html_escape` are the only ways text reaches a page. Both first replace control
characters and bidirectional overrides (which could hide or reorder the text around a
name) with U+FFFD. The HTML file
embeds its figures as base64 `data:` URIs and its style inline: it loads nothing, from
the network or from disk.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

# every character that can start or end Markdown markup inside a line: emphasis, code,
# links and images, raw HTML and entities, table cells, strikethrough, and the math of
# GitHub and other renderers ($...$)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&$])")
_MD_LINE_START = re.compile(r"^(?:([#+\-=>])|(\d+)([.)]))")
# C0 and C1 controls but tab, newline and carriage return (whitespace), and the Unicode
# bidirectional embeddings, overrides, isolates and marks
_UNSAFE_CHARS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Image:
    name: str  # file name under figures/
    title: str
    caption: str


Block = Heading | Paragraph | Bullets | Table | Image


def _printable(text: object) -> str:
    return _UNSAFE_CHARS.sub("\ufffd", str(text))


def html_escape(text: object) -> str:
    """Text that HTML shows as written, in an element or a quoted attribute."""
    return html.escape(_printable(text), quote=True)


def md_escape(text: str, *, line_start: bool = True) -> str:
    """Text that Markdown shows as written (no markup, no raw HTML, no math, one line);
    with `line_start`, also what would start a block at the beginning of a line."""
    text = _MD_SPECIAL.sub(r"\\\1", " ".join(_printable(text).split()))
    if not line_start:
        return text
    # a leading # + - = > or "1." would start a heading, list or quote
    return _MD_LINE_START.sub(lambda m: "\\" + m[1] if m[1] else f"{m[2]}\\{m[3]}", text)


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            # a trailing run of # after a space would be read as the closing sequence
            text = re.sub(r"(^|\s)#(#*)$", r"\1\\#\2", md_escape(block.text))
            out.append(f"{'#' * block.level} {text}")
        elif isinstance(block, Paragraph):
            out.append(md_escape(block.text))
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {md_escape(item)}" for item in block.items))
        elif isinstance(block, Table):

            def cells(items: tuple[str, ...]) -> str:
                return "| " + " | ".join(md_escape(c, line_start=False) for c in items) + " |"

            lines = [cells(block.headers), "|" + "---|" * len(block.headers)]
            lines += [cells(row) for row in block.rows]
            out.append("\n".join(lines))
        else:
            out.append(
                f"![{md_escape(block.title)}](figures/{quote(block.name)})\n\n"
                f"*{md_escape(block.caption)}*"
            )
    return "\n\n".join(out) + "\n"


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:960px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #4c72b0;padding-bottom:.2em}
h2{margin-top:1.8em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
th{background:#f0f3f8}
figure{margin:1.2em 0}
figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444}
"""


def to_html(blocks: list[Block], figures_dir: Path, *, title: str) -> str:
    """One HTML page; images are read from figures_dir and embedded."""
    esc = html_escape
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            level = min(max(block.level, 1), 6)
            body.append(f"<h{level}>{esc(block.text)}</h{level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{esc(block.text)}</p>")
        elif isinstance(block, Bullets):
            items = "".join(f"<li>{esc(item)}</li>" for item in block.items)
            body.append(f"<ul>{items}</ul>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{esc(h)}</th>" for h in block.headers)
            rows = "".join(
                "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        else:
            data = base64.b64encode((figures_dir / block.name).read_bytes()).decode("ascii")
            body.append(
                f'<figure><img alt="{esc(block.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(block.caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


__all__ = [
    "Block",
    "Bullets",
    "Heading",
    "Image",
    "Paragraph",
    "Table",
    "html_escape",
    "md_escape",
    "to_html",
    "to_markdown",
]
