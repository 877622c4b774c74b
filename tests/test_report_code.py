"""Code spans in reports (issue 54): the report's own commands render as code in HTML and
Markdown (no literal backticks on the page), while backticks in plain text, where a user's
name brings them, stay characters in both."""

from __future__ import annotations

from pathlib import Path

from markdown_it import MarkdownIt

from replay.report.document import Code, Paragraph, md_code, plain_text, to_html, to_markdown

NAME = "my `table` <b>"  # a user's name holding backticks and markup


def _md_code_spans(md: str) -> list[str]:
    tokens = MarkdownIt("commonmark").parse(md)
    inline = [c for t in tokens for c in (t.children or [])]
    return [t.content for t in inline if t.type == "code_inline"]


def test_code_parts_are_code_and_names_are_not(tmp_path: Path) -> None:
    block = Paragraph(("From ", Code("replay plan"), f" ({NAME}): answers."))
    page = to_html([block], tmp_path, title="t")
    assert "<p>From <code>replay plan</code> (my `table` &lt;b&gt;): answers.</p>" in page
    md = to_markdown([block])
    assert _md_code_spans(md) == ["replay plan"]
    assert "\\`table\\`" in md  # the name's backticks escaped: characters, not code
    assert plain_text(block.text) == f"From `replay plan` ({NAME}): answers."


def test_a_plain_string_never_makes_code(tmp_path: Path) -> None:
    block = Paragraph(f"as `replay plan` measures it, {NAME}")
    assert "<code>" not in to_html([block], tmp_path, title="t")
    assert _md_code_spans(to_markdown([block])) == []


def test_md_code_fences_past_the_backticks_inside() -> None:
    assert md_code("replay plan") == "`replay plan`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("`x") == "`` `x ``"
    for text in ("a`b", "`x", "x``y`"):
        assert _md_code_spans(md_code(text)) == [text]
