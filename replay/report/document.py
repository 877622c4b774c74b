"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML file.

Blocks hold plain text and the report's own code spans (`Code`, a part the report's code
writes: a command, an option); each renderer escapes the text for its format, so a system
name, a label or a path from a result folder can never inject Markdown or HTML, nor become
code: `md_escape` and `html_escape` are the only ways text reaches a page, and only a
`Code` part is rendered as code (`md_code`, `<code>`). Both first replace control
characters and bidirectional overrides (which could hide or reorder the text around a
name) with U+FFFD. The HTML file
embeds its figures as base64 `data:` URIs and its style inline: it loads nothing, from
the network or from disk.

Anchors: every heading has one (`Heading.anchor`, set by `assign_anchors`): GitHub's
slug of its text (lower case, punctuation dropped, spaces as hyphens, `-1`, `-2` for
repeats), so a Markdown renderer that makes ids of headings makes these, without raw
HTML in the Markdown; the HTML page sets them as the headings' `id`. A `Link` inside a
paragraph or a bullet points at an anchor (`#...`) or a figure (`figures/...`) only: its
target is made by the report, never taken from a result folder.
"""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from replay._units import format_multiple as fmt_multiple
from replay._units import format_percent

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
    anchor: str = ""  # set by `assign_anchors`


@dataclass(frozen=True)
class Link:
    """A link inside a paragraph or a bullet: to `#anchor` or `figures/NAME.png`."""

    text: str
    target: str

    def __post_init__(self) -> None:
        if not _TARGET.fullmatch(self.target):
            raise ValueError(f"not a report-internal link target: {self.target!r}")


@dataclass(frozen=True)
class Code:
    """A code span the report's own code writes (a command, an option, a spec key): shown
    as code (`<code>` in HTML, a backtick span in Markdown). Only a `Code` part is ever
    code: backticks inside plain text, where a user's name may bring them, stay literal
    characters, so no name from a result folder can become a code span."""

    text: str


# what a paragraph or a bullet holds: text, or text with links and code spans
Text = str | tuple[str | Link | Code, ...]


@dataclass(frozen=True)
class Paragraph:
    text: Text


@dataclass(frozen=True)
class Bullets:
    items: tuple[Text, ...]


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

# a link target: an anchor, or a figure of the report (a plain file name)
_TARGET = re.compile(r"#[a-z0-9_-]+|figures/[A-Za-z0-9_.-]+\.png")
# a numeric table cell (kept on one line in HTML): a number with its unit or sign
_NUMERIC = re.compile(
    r"[~≈<>≥≤±+\-−]?\s?[0-9][0-9,.]*(?:e[+-]?[0-9]+)?\s?"
    r"(?:%|×|[a-zA-Zµ/]{1,6}(?:/s)?)?(?:\s?[–-]\s?[0-9][0-9,.]*\s?(?:%|×|[a-zA-Z/]{1,6})?)?"
    r"|n/a|-|—"
)


def slug(text: str) -> str:
    """GitHub's anchor of a heading's text: lower case, letters, digits, `-` and `_`
    kept, spaces as `-`, everything else dropped (ASCII only, so an id is plain)."""
    text = _printable(text).strip().lower()
    kept = re.sub(r"[^a-z0-9 _-]", "", text.encode("ascii", "ignore").decode())
    return kept.replace(" ", "-") or "section"


def assign_anchors(blocks: list[Block]) -> list[Block]:
    """Each heading with its anchor: the one it was given, else its slug; a repeat gets
    `-1`, `-2`, ... (as GitHub numbers them), so every anchor is unique."""
    seen: dict[str, int] = {}
    out: list[Block] = []
    for block in blocks:
        if isinstance(block, Heading):
            base = block.anchor or slug(block.text)
            anchor = base
            while anchor in seen:
                seen[base] += 1
                anchor = f"{base}-{seen[base]}"
            seen.setdefault(anchor, 0)
            block = Heading(block.text, block.level, anchor)
        out.append(block)
    return out


def md_code(text: str) -> str:
    """A Markdown code span of `text`: fenced by one backtick more than its longest run of
    them (a span holds no escapes), padded where it starts or ends with one."""
    text = " ".join(_printable(text).split())
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_text(text: Text) -> str:
    if isinstance(text, str):
        return md_escape(text)
    parts = []
    for i, part in enumerate(text):
        if isinstance(part, Code):
            parts.append(md_code(part.text))
        elif isinstance(part, Link):
            target = quote(part.target, safe="/#")
            parts.append(f"[{md_escape(part.text, line_start=False)}]({target})")
        else:  # the spaces around a piece of text separate it from the links
            lead = " " if part[:1].isspace() and i else ""
            trail = " " if part[-1:].isspace() and part.strip() else ""
            parts.append(lead + md_escape(part, line_start=i == 0) + trail)
    return "".join(parts)


def html_text(text: object) -> str:
    """Plain text that HTML shows as written: a backtick in it (a user's name may hold
    them) stays a backtick; the report's own code spans are `Code` parts."""
    return html_escape(text)


def _html_part(part: str | Link | Code) -> str:
    if isinstance(part, Code):
        return f"<code>{html_escape(' '.join(part.text.split()))}</code>"
    if isinstance(part, Link):
        return f'<a href="{html_escape(part.target)}">{html_text(part.text)}</a>'
    return html_text(part)


def _html_text(text: Text) -> str:
    if isinstance(text, str):
        return html_text(text)
    return "".join(_html_part(part) for part in text)


def plain_text(text: Text) -> str:
    """The words of a paragraph or bullet, links as their text, code spans in backticks."""
    if isinstance(text, str):
        return text
    return "".join(
        f"`{p.text}`" if isinstance(p, Code) else p.text if isinstance(p, Link) else p for p in text
    )


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
            out.append(_md_text(block.text))
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {_md_text(item)}" for item in block.items))
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
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #4c72b0;padding-bottom:.2em}
h2{margin-top:1.8em;border-bottom:1px solid #ccc}
a{color:#2a5599}
table{display:block;max-width:100%;overflow-x:auto;border-collapse:collapse;margin:1em 0;
font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top;
word-break:normal;overflow-wrap:normal;hyphens:none}
th{background:#f0f3f8;min-width:5em}
td{min-width:4em}
td.num{white-space:nowrap;text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1.2em 0}
figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em;
background:#f3f4f6;padding:0 .2em;border-radius:3px}
"""


def fmt_ratio(x: float | None, digits: int = 3) -> str:
    """A ratio as people read it: a percentage up to 100% (`97.3%`, `0.12%`), a multiple
    above (`1.5×`, `6,212×`); never a percentage over 100%."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if abs(x) > 1:
        return fmt_multiple(x, digits)
    return format_percent(x, digits)  # a tiny share as 0.00003%, never 3.00e-05%


def fmt_saving(x: float | None) -> str:
    """A saving (1 − new/old) as `35% less`, or `1.5× more` when it is negative past −100%."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x >= 0:
        return f"{fmt_ratio(x)} less"
    return f"{fmt_ratio(-x)} more" if -x <= 1 else f"{fmt_multiple(1 - x)} as much"


def _cell(text: str) -> str:
    """A table cell; a number (with its unit) is kept on one line."""
    numeric = _NUMERIC.fullmatch(" ".join(str(text).split())) is not None
    return f'<td class="num">{html_escape(text)}</td>' if numeric else f"<td>{html_text(text)}</td>"


def to_html(blocks: list[Block], figures_dir: Path, *, title: str) -> str:
    """One HTML page; images are read from figures_dir and embedded."""
    esc = html_escape
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            level = min(max(block.level, 1), 6)
            anchor = f' id="{esc(block.anchor)}"' if block.anchor else ""
            body.append(f"<h{level}{anchor}>{html_text(block.text)}</h{level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_html_text(block.text)}</p>")
        elif isinstance(block, Bullets):
            items = "".join(f"<li>{_html_text(item)}</li>" for item in block.items)
            body.append(f"<ul>{items}</ul>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html_text(h)}</th>" for h in block.headers)
            rows = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in block.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        else:
            data = base64.b64encode((figures_dir / block.name).read_bytes()).decode("ascii")
            body.append(
                f'<figure><img alt="{esc(block.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html_text(block.caption)}</figcaption></figure>"
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
    "Code",
    "Heading",
    "Image",
    "Link",
    "Paragraph",
    "Table",
    "Text",
    "assign_anchors",
    "fmt_multiple",
    "fmt_ratio",
    "fmt_saving",
    "html_escape",
    "html_text",
    "md_code",
    "md_escape",
    "plain_text",
    "slug",
    "to_html",
    "to_markdown",
]
