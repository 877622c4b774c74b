"""Untrusted content (issue 7, "Hardening"): no pickle or eval anywhere in `replay/`, and
names from traces and configs are shown as written, never as markup, in report.md,
report.html and the figures.

1. A source scan: every `replay/**/*.py` is parsed with `ast` (so a comment or a string
   that mentions pickle is no finding) and checked for deserialisers that run code
   (pickle, marshal, shelve, dill, cloudpickle, numpy's `allow_pickle`, `read_pickle`,
   unsafe YAML), dynamic code (`eval`, `exec`, builtin `compile`, `__import__`,
   `importlib.import_module`) and shells (`shell=True`, `os.system`, `os.popen`). The
   checker is itself tested on a snippet of each pattern, so the scan can fail.
2. End to end through the real CLI (in process): a trace whose table names, a system whose
   name, tier names and link names, and result folders (run, sweep, compare, mrc) whose
   names are hostile strings (HTML, Markdown, mathtext, entities, newlines, control and
   bidi characters, non-ASCII, very long); then `replay report` must exit 0 and write a
   page with no tag, attribute, link or heading from a name, Markdown tables whose rows
   keep their cells, `$` escaped, and figures drawn with every text as written (mathtext
   and TeX off). Where a loader rejects a name (a `replay compare` system name is a folder
   name), the error is one line on stderr and exit code 2.
"""

from __future__ import annotations

import ast
import json
import os
import re
import textwrap
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from matplotlib import rc_context
from matplotlib.cbook import is_math_text
from matplotlib.figure import Figure
from matplotlib.text import Text

import replay.report.figures as figures_module
import replay.report.scenario_figures as scenario_module
from replay.cli import main
from replay.report.document import Heading as MdHeading
from replay.report.document import md_escape, to_markdown

PACKAGE = Path(__file__).resolve().parents[1] / "replay"

# -- 1. the source scan ---------------------------------------------------------------------

FORBIDDEN_MODULES = frozenset(
    {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"}
)
# calls forbidden whatever their arguments, by the dotted name they resolve to
FORBIDDEN_CALLS = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "__import__",
        "builtins.eval",
        "builtins.exec",
        "builtins.compile",
        "builtins.__import__",
        "importlib.import_module",
        "importlib.__import__",
        "os.system",
        "os.popen",
        "pandas.read_pickle",
        "pandas.eval",
        "yaml.unsafe_load",
        "yaml.unsafe_load_all",
        "yaml.full_load",
        "yaml.full_load_all",
    }
)
BUILTIN_CALLS = frozenset({"eval", "exec", "compile", "__import__"})
SAFE_YAML_LOADERS = frozenset({"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"})


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a Name or a chain of Attributes on a Name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _is_false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


class _Scanner(ast.NodeVisitor):
    """Findings as `line: what` strings. Import aliases are followed (`import numpy as
    np` makes `np.load` numpy.load; `from os import system as s` makes `s` os.system), so
    a renamed import hides nothing; a builtin name rebound by an import or a def of the
    module is not the builtin."""

    def __init__(self, tree: ast.Module) -> None:
        self.findings: list[str] = []
        self.aliases: dict[str, str] = {}
        self.rebound: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.rebound.add(node.name)

    def _flag(self, node: ast.AST, what: str) -> None:
        self.findings.append(f"{getattr(node, 'lineno', 0)}: {what}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                self._flag(node, f"import {alias.name}")
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else local
            self.rebound.add(local)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module.split(".")[0] in FORBIDDEN_MODULES:
            self._flag(node, f"from {module} import ...")
        for alias in node.names:
            if alias.name in FORBIDDEN_MODULES:
                self._flag(node, f"from {module} import {alias.name}")
            local = alias.asname or alias.name
            self.aliases[local] = f"{module}.{alias.name}" if module else alias.name
            self.rebound.add(local)
        self.generic_visit(node)

    def _resolve(self, func: ast.expr) -> str | None:
        name = _dotted(func)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.aliases:
            head = self.aliases[head]
        elif "." not in name and name in BUILTIN_CALLS and name in self.rebound:
            return f"<local {name}>"
        full = f"{head}.{rest}" if rest else head
        # the usual short names of numpy and pandas, also when imported elsewhere
        for short, long in (("np.", "numpy."), ("pd.", "pandas.")):
            if full.startswith(short):
                full = long + full[len(short) :]
        return full

    def visit_Call(self, node: ast.Call) -> None:
        name = self._resolve(node.func)
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        if name in FORBIDDEN_CALLS:
            self._flag(node, f"call {name}()")
        elif name in ("yaml.load", "yaml.load_all"):
            loader = keywords.get("Loader", node.args[1] if len(node.args) > 1 else None)
            loader_name = _dotted(loader) if loader is not None else None
            if loader_name is None or loader_name.split(".")[-1] not in SAFE_YAML_LOADERS:
                self._flag(node, f"call {name}() without a safe Loader")
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "read_pickle":
            self._flag(node, f"call {name or '...'}.read_pickle()")
        if name is not None and name.split(".")[-1] == "load" and name.startswith("torch."):
            weights_only = keywords.get("weights_only")
            if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                self._flag(node, "call torch.load() without weights_only=True")
        if "allow_pickle" in keywords and not _is_false(keywords["allow_pickle"]):
            self._flag(node, f"call {name or '...'}(allow_pickle=...) not False")
        if "shell" in keywords and not _is_false(keywords["shell"]):
            self._flag(node, f"call {name or '...'}(shell=...) not False")
        self.generic_visit(node)


def scan_source(source: str) -> list[str]:
    """The forbidden uses in one module's source."""
    tree = ast.parse(source)
    scanner = _Scanner(tree)
    scanner.visit(tree)
    return scanner.findings


@pytest.mark.parametrize(
    "snippet",
    [
        "import pickle",
        "import cPickle",
        "import marshal as m",
        "import shelve",
        "import dill",
        "import cloudpickle",
        "import os, pickle",
        "from pickle import loads",
        "from _pickle import loads",
        "from six.moves import cPickle",
        "x = eval('1 + 1')",
        "exec('x = 1')",
        "code = compile('1', '<s>', 'eval')",
        "m = __import__('os')",
        "import builtins\nbuiltins.eval('1')",
        "from builtins import exec as run\nrun('x = 1')",
        "import importlib\nimportlib.import_module(name)",
        "import yaml\nyaml.load(text)",
        "import yaml\nyaml.load(text, Loader=yaml.Loader)",
        "import yaml\nyaml.load_all(text, yaml.FullLoader)",
        "import yaml\nyaml.unsafe_load(text)",
        "from yaml import load\nload(text)",
        "import numpy as np\nnp.load(path, allow_pickle=True)",
        "import numpy\nnumpy.load(path, allow_pickle=flag)",
        "from numpy import load as l\nl(path, allow_pickle=True)",
        "import pandas as pd\npd.read_pickle(path)",
        "import pandas\npandas.read_pickle(path)",
        "frame = read(path).read_pickle(other)",
        "import subprocess\nsubprocess.run(cmd, shell=True)",
        "import subprocess as sp\nsp.Popen(cmd, shell=1)",
        "from subprocess import check_output\ncheck_output(cmd, shell=True)",
        "import os\nos.system('ls')",
        "from os import system\nsystem('ls')",
        "import os\nos.popen('ls')",
        "import torch\ntorch.load(path)",
    ],
)
def test_the_scan_flags_each_forbidden_pattern(snippet: str) -> None:
    assert scan_source(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "# import pickle; eval(x); os.system('x')  (a comment is no use)",
        "'''import pickle\neval(x)\n'''",
        "text = 'np.load(p, allow_pickle=True) and pd.read_pickle(p)'",
        "import re\nre.compile(r'x')",
        "from re import compile\ncompile('x')",
        "def compile(x):\n    return x\n\ncompile(1)",
        "import numpy as np\nnp.load(path)\nnp.load(path, allow_pickle=False)",
        "import subprocess\nsubprocess.run(['ls'], check=True)\nsubprocess.run(c, shell=False)",
        "import yaml\nyaml.safe_load(text)\nyaml.load(text, Loader=yaml.SafeLoader)",
        "import polars as pl\npl.col('x').eval(pl.element())",
        "import json\njson.loads('{}')",
        "import torch\ntorch.load(path, weights_only=True)",
    ],
)
def test_the_scan_passes_harmless_code(snippet: str) -> None:
    assert scan_source(snippet) == [], snippet


def test_no_pickle_eval_or_shell_in_the_package() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 30, files  # the scan sees the package
    findings = [
        f"{path.relative_to(PACKAGE.parent)}:{finding}"
        for path in files
        for finding in scan_source(path.read_text(encoding="utf-8"))
    ]
    assert findings == [], "\n".join(findings)


# -- 2. names from traces and configs, end to end -------------------------------------------

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
PIPES = "| pipe | table"
MARKDOWN = "*bold* _em_ [link](javascript:alert(1))"
CODE = "`code`"
HEADING = "# heading"
MATH = r"$\frac{a}{b}$"
BAD_MATH = r"a$\frac$b"  # an error if mathtext parsed it
LONE_DOLLAR = "lone $ dollar"
ENTITY = "&amp;"
NEWLINE = "two\nlines"
CJK = "表 😀"
CONTROL = "esc\x1b[31mred\x07 rtl\u202eevil"  # an ANSI colour, a bell, a bidi override
LONG = "L" * 300

# table names of the trace: every hostile string (a workload spec takes any string)
TABLE_NAMES = [
    SCRIPT, IMG, PIPES, MARKDOWN, CODE, HEADING, MATH, BAD_MATH, LONE_DOLLAR, ENTITY,
    NEWLINE, CJK, CONTROL, LONG,
]  # fmt: skip
# the system: its name, its tiers and its links
SYSTEM_NAME = f"{HEADING} {SCRIPT} {MARKDOWN} {PIPES} {CODE} {MATH} {ENTITY}\n{CJK}"
SYSTEM2_NAME = f"_under {BAD_MATH} {IMG} {CONTROL} {LONG}"  # "_": matplotlib's "no legend"
FAST, BACKING, DRIVE = SCRIPT, IMG, MATH
LINK1, LINK2 = MARKDOWN, f"{PIPES} {LONE_DOLLAR}"
# result folders (no "/": a folder name cannot hold one)
RUN_FOLDER = f'{HEADING} "><img src=x onerror=alert(1)> {BAD_MATH}'
SWEEP_FOLDER = f"<img src=x onerror=alert(1)> {MATH} | x |"
COMPARE_FOLDER = f"{HEADING} <b>bold {LONE_DOLLAR} *x* #"  # a trailing "#" too
LONG_FOLDER = ("| *x* $ _ " * 30)[:250]  # a comparison renamed so: 250 of 255 bytes
MRC_FOLDERS = [f"mrc {SCRIPT[:8]} {CJK}", f"mrc {LONE_DOLLAR} {NEWLINE}"]

# what report.html may hold: these tags, these attributes
HTML_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "ul", "li",
    "table", "thead", "tbody", "tr", "th", "td", "figure", "img", "figcaption", "a", "div",
    "code",
}  # fmt: skip
# what the report's own code spans hold (a command, an option): never a name's backticks
OWN_CODE = re.compile(r"[A-Za-z0-9_./=+ -]+")
# the report's own anchors (ids of headings, links to them) and numeric cells' class:
# their values are checked below to be slugs, never a name as written
HTML_ATTRIBUTES = {
    "html": {"lang"}, "meta": {"charset"}, "img": {"alt", "src"}, "h1": {"id"}, "h2": {"id"},
    "h3": {"id"}, "a": {"href"}, "td": {"class"}, "div": {"class"},
}  # fmt: skip
SLUG = re.compile(r"[a-z0-9_-]+")
HEADINGS = {
    "replay report",
    "Summary",
    "Contents",
    "Claims: the papers beside this model",
    "Warnings",
    "Workload",
    "Memory hierarchy",
    "Time per batch",
    "Runs given alone",
    "Checkpoints",
    "Failures and goodput",
    "Energy",
    "Other sweeps",
    "Result folders",
}


def _toml(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; non-ASCII stays as is)."""
    return json.dumps(text, ensure_ascii=False)


def _system_toml(name: str) -> str:
    return textwrap.dedent(
        f"""\
        name = {_toml(name)}
        [tiers.{_toml(FAST)}]
        device = "h100-hbm3"
        [tiers.{_toml(BACKING)}]
        device = "ddr4-3200-8ch"
        [tiers.{_toml(DRIVE)}]
        device = "nvme-gen4"
        [links.{_toml(LINK1)}]
        device = "pcie5-x16"
        [links.{_toml(LINK2)}]
        device = "pcie5-x16"
        [lookup]
        location = "gpu"
        link = {_toml(LINK1)}
        [policy]
        name = "lru"
        fast_tier = {_toml(FAST)}
        backing_tier = {_toml(BACKING)}
        capacity_rows = 100
        [compute]
        seconds_per_batch = 0.0005
        [checkpoint]
        strategy = "sync-full"
        interval_batches = 2
        target = {_toml(DRIVE)}
        link = {_toml(LINK2)}
        [failures]
        mtbf_s = 10.0
        draws = 8
        """
    )


def _ok(*args: object) -> None:
    argv = [str(a) for a in args]
    assert main(argv) == 0, argv


@dataclass(frozen=True)
class Inputs:
    base: Path
    trace: Path  # 6 batches of 8 samples, a table per hostile name
    system_file: Path  # SYSTEM_NAME
    system2_file: Path  # SYSTEM2_NAME


@dataclass(frozen=True)
class Hostile:
    results: Path
    report: Path
    texts: list[tuple[str, bool, bool]]  # every figure text: (text, parse_math, usetex)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    """A 6-batch trace of 8 samples with hostile table names, and two hostile systems."""
    base = tmp_path_factory.mktemp("untrusted")
    spec = ['name = "hostile"', "batch_size = 8", "batches = 6", "embedding_dim = 4"]
    for name in TABLE_NAMES:
        spec += ["[[tables]]", f"name = {_toml(name)}", "rows = 40"]
    (base / "workload.toml").write_text("\n".join(spec) + "\n", encoding="utf-8")
    trace = base / "trace"
    _ok("generate", "--spec", base / "workload.toml", "--out", trace, "--workers", "1")
    system = base / "system.toml"
    system.write_text(_system_toml(SYSTEM_NAME), encoding="utf-8")
    system2 = base / "system2.toml"
    system2.write_text(_system_toml(SYSTEM2_NAME), encoding="utf-8")
    return Inputs(base, trace, system, system2)


@pytest.fixture(scope="module")
def hostile(inputs: Inputs) -> Hostile:
    """A run, a sweep, two comparisons and two miss-ratio curves in hostile folders on
    the hostile trace and systems, and their report, made while recording every text of
    every figure as it is saved."""
    trace, system, system2 = inputs.trace, inputs.system_file, inputs.system2_file
    res = inputs.base / "results"
    one = ["--workers", "1"]
    _ok("run", trace, "--system", system, "--out", res / RUN_FOLDER)
    _ok("run", trace, "--system", system2, "--set", "policy.capacity_rows=20",
        "--out", res / "_run2")  # fmt: skip
    # grid values are link names: they show in the sweep's labels
    _ok("sweep", trace, "--system", system, "--grid", "policy.capacity_rows=20,200",
        "--grid", f"lookup.link={LINK1},{LINK2}", *one, "--out", res / SWEEP_FOLDER)  # fmt: skip
    _ok("compare", trace, "--systems", "hbm-lru,hbm-lfu", "--set", "policy.capacity_rows=50",
        *one, "--out", res / COMPARE_FOLDER)  # fmt: skip
    _ok("compare", trace, "--systems", "hbm-lru,dram", *one, "--out", res / "long")
    (res / "long").rename(res / LONG_FOLDER)
    for folder in MRC_FOLDERS:
        _ok("mrc", trace, "--out", res / folder)

    texts: list[tuple[str, bool, bool]] = []
    real_save = figures_module.save

    def recording_save(fig: Figure, path: Path) -> None:
        real_save(fig, path)  # tick labels are made while it draws: record after
        texts.extend(
            (t.get_text(), t.get_parse_math(), t.get_usetex())
            for t in fig.findobj(Text)
            if t.get_text()
        )

    report = inputs.base / "report"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(figures_module, "save", recording_save)
        patch.setattr(scenario_module, "save", recording_save)
        _ok("report", res, "--out", report)
    return Hostile(res, report, texts)


class _Page(HTMLParser):
    """The tags, attributes and text of an HTML page (character references decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse_html(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def _shown(name: str) -> str:
    """A name as the report shows it in text: whitespace runs as one space; control and
    bidi characters as U+FFFD."""
    name = re.sub(
        r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", "\ufffd", name
    )
    return " ".join(name.split())


def _summary(hostile: Hostile) -> dict:
    return json.loads((hostile.report / "summary.json").read_text(encoding="utf-8"))


def test_the_report_holds_every_result(hostile: Hostile) -> None:
    summary = _summary(hostile)
    systems = {run["system"] for run in summary["runs"]}
    assert {SYSTEM_NAME, SYSTEM2_NAME, "hbm-lru", "hbm-lfu", "dram"} == systems
    assert len(summary["runs"]) == 2 + 4 + 2 + 2
    # JSON keeps every name exactly, newlines and control characters included
    labels = {run["label"] for run in summary["runs"]}
    assert f"{SYSTEM_NAME} ({RUN_FOLDER})" in labels
    assert f"{SYSTEM2_NAME} (_run2)" in labels
    workload = json.loads((hostile.results / "_run2" / "workload.json").read_text("utf-8"))
    assert [table["name"] for table in workload["tables"]] == TABLE_NAMES


def test_html_makes_no_tag_attribute_or_link_of_a_name(hostile: Hostile) -> None:
    page = (hostile.report / "report.html").read_text(encoding="utf-8")
    parsed = _parse_html(page)
    for tag, attrs in parsed.tags:
        assert tag in HTML_TAGS, tag
        assert set(attrs) <= HTML_ATTRIBUTES.get(tag, set()), (tag, attrs)
    images = [attrs for tag, attrs in parsed.tags if tag == "img"]
    assert len(images) == len(_summary(hostile)["figures"])
    assert all((a["src"] or "").startswith("data:image/png;base64,") for a in images)
    lowered = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "", page).lower()
    assert "<script" not in lowered and "<img src=x" not in lowered and "<b>" not in lowered
    # links only to the report's own anchors, ids only slugs (never a name as written)
    for _, attrs in parsed.tags:
        if "href" in attrs:
            assert (attrs["href"] or "").startswith("#") and SLUG.fullmatch(attrs["href"][1:])
        if "id" in attrs:
            assert SLUG.fullmatch(attrs["id"] or ""), attrs
        if "class" in attrs:
            assert SLUG.fullmatch(attrs["class"] or ""), attrs
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    # the text a reader sees holds the names as written
    text = "".join(parsed.text)
    for name in (SYSTEM_NAME, SYSTEM2_NAME, RUN_FOLDER, COMPARE_FOLDER, LONG_FOLDER):
        assert _shown(name) in " ".join(text.split()), name
    assert "\x1b" not in page and "\x07" not in page and "\u202e" not in page
    # code spans are the report's own; a name's backticks stay characters
    spans = re.findall(r"<code>(.*?)</code>", page, re.S)
    assert spans and all(OWN_CODE.fullmatch(s) for s in spans), spans
    assert CODE in text


def _md_tokens(md: str) -> list:
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    flat = []
    for token in tokens:
        flat.append(token)
        flat.extend(token.children or [])
    return flat


def _cells(line: str) -> int:
    """Cell separators in a Markdown table row: `|` not escaped by a backslash."""
    count, i = 0, 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        count += line[i] == "|"
        i += 1
    return count


def test_markdown_makes_no_markup_of_a_name(hostile: Hostile) -> None:
    md = (hostile.report / "report.md").read_text(encoding="utf-8")
    tokens = _md_tokens(md)
    kinds = {t.type for t in tokens}
    assert not kinds & {"html_block", "html_inline", "fence"}, kinds
    # code spans: only the report's own (a command), never a name's backticks
    code = [t.content for t in tokens if t.type == "code_inline"]
    assert code and all(OWN_CODE.fullmatch(c) for c in code), code
    # links only to the report's own headings (`#slug`), never made of a name
    links = [t.attrs.get("href", "") for t in tokens if t.type == "link_open"]
    assert all(h.startswith("#") and SLUG.fullmatch(h[1:]) for h in links), links
    assert not kinds & {"code_block", "strong_open", "blockquote_open", "ordered_list_open"}
    figures = {f["name"] for f in _summary(hostile)["figures"]}
    images = [t.attrs["src"] for t in tokens if t.type == "image"]
    assert sorted(images) == sorted(f"figures/{name}" for name in figures)
    # every emphasis is a figure's caption, as a whole
    assert sum(t.type == "em_open" for t in tokens) == len(figures)
    # headings: the report's own, and "Comparison <folder>" with the folder as written
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    comparisons = [h for h in headings if h not in HEADINGS]
    assert len(comparisons) == 2, headings
    html_out = MarkdownIt("commonmark").enable("table").render(md)
    assert "<h3>Comparison " + _html_text(_shown(COMPARE_FOLDER)) + "</h3>" in html_out
    assert "<h3>Comparison " + _html_text(_shown(LONG_FOLDER)) + "</h3>" in html_out
    assert sum(line.startswith("#") for line in md.splitlines()) == len(headings)
    # no raw $ (GitHub and others render $...$ as math): each one is escaped
    for line in md.splitlines():
        for match in re.finditer(r"(\\*)\$", line):
            assert len(match.group(1)) % 2 == 1, line
    # the rendered page shows the names as written
    for name in (SYSTEM_NAME, SYSTEM2_NAME, RUN_FOLDER):
        assert _html_text(_shown(name)) in html_out, name
    assert "javascript:" not in "".join(re.findall(r'(?:href|src)="[^"]*"', html_out))
    assert "\x1b" not in md and "\u202e" not in md and "\ufffd" in md


def _html_text(text: str) -> str:
    """`text` as markdown-it writes it into HTML."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def test_markdown_tables_keep_their_columns(hostile: Hostile) -> None:
    md = (hostile.report / "report.md").read_text(encoding="utf-8")
    tables = [block.splitlines() for block in md.split("\n\n") if block.startswith("| ")]
    assert len(tables) >= 5
    named_rows = 0
    for lines in tables:
        width = _cells(lines[0])
        assert re.fullmatch(r"\|(---\|)+", lines[1]), lines[1]
        for line in lines[2:]:
            assert line.startswith("| ") and line.endswith(" |"), line
            assert _cells(line) == width, line
            named_rows += "pipe" in line
    assert named_rows >= 4  # the run, the sweep's points, ... with "| pipe | table"
    # and a renderer shows the name, | and all, in one cell
    html_out = MarkdownIt("commonmark").enable("table").render(md)
    assert f"<td>{_html_text(_shown(SYSTEM_NAME))} ({_html_text(RUN_FOLDER)})</td>" in html_out


def test_figures_draw_names_as_written(hostile: Hostile) -> None:
    summary = _summary(hostile)
    names = {f["name"] for f in summary["figures"]}
    assert {
        "workload_skew.png",
        "hierarchy_hits.png",
        "hierarchy_traffic.png",
        "mrc.png",
        "checkpoint_bytes.png",
        "time_runs.png",
        "energy_runs.png",
    } <= names
    assert sum(n.startswith("sweep_") for n in names) == 1
    assert sum(n.startswith("time_") for n in names) == 3  # runs and both comparisons
    on_disk = {p.name for p in (hostile.report / "figures").iterdir()}
    assert on_disk == names
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9_-]+\.png", name) and len(name) <= 100, name
        data = (hostile.report / "figures" / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n"), name
    # no text of any figure goes through TeX, and the only mathtext, if any, is a number
    # formatter's own (the log axes write plain numbers: `PlainLogFormatter`'s 1,000, not
    # $\mathdefault{10^{3}}$); every name draws as written
    assert hostile.texts
    assert not any(usetex for _, _, usetex in hostile.texts)
    math = [text for text, parse_math, _ in hostile.texts if parse_math and is_math_text(text)]
    for text in math:
        number = re.fullmatch(r"\$\\mathdefault\{(.*)\}\$", text)
        assert number and re.fullmatch(r"[0-9^{}.\-−]*", number[1].replace(r"\times", "")), text
    drawn = "\n".join(_drawn(text, parse_math) for text, parse_math, _ in hostile.texts)
    for shown in (
        MATH,  # table names, as tick labels of the workload figures
        LONE_DOLLAR,
        BAD_MATH,
        f"{LINK1} h2d",  # a link name in the traffic legend
        " _under",  # a label starting with "_" still gets its legend entry
    ):
        assert shown in drawn, shown


def _drawn(text: str, parse_math: bool) -> str:
    """What matplotlib draws for a text that is not mathtext (`Text._preprocess_math`)."""
    return text.replace(r"\$", "$") if parse_math else text


@pytest.mark.parametrize(
    "rc", [{}, {"text.usetex": True}, {"text.parse_math": False}, {"text.parse_math": True}]
)
def test_save_draws_names_as_written_whatever_the_matplotlibrc(tmp_path: Path, rc: dict) -> None:
    # a user's matplotlibrc may turn TeX on (a name must never reach a TeX run) or
    # mathtext off (the log axes' labels are mathtext): `save` decides, not the rc
    with rc_context(rc):
        fig = figures_module.new_figure()
        ax, log_ax = fig.subplots(1, 2)
        title = ax.set_title(BAD_MATH)
        ax.set_xticks([0, 1], [MATH, LONE_DOLLAR])  # names as categories
        ax.bar([0, 1], [1, 2], label=MATH)
        ax.legend()
        log_ax.bar([str(d) for d in (1, 2)], [1, 2])  # string categories too
        log_ax.plot([1, 1000], [1, 1000])
        log_ax.set_yscale("log")
        log_ax.set_ylabel(LONE_DOLLAR)
        figures_module.save(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes().startswith(b"\x89PNG")
    texts = [t for t in fig.findobj(Text) if t.get_text()]
    assert title in texts
    assert not any(t.get_usetex() for t in texts)
    drawn = [
        _drawn(t.get_text(), t.get_parse_math())
        for t in texts
        if not (t.get_parse_math() and is_math_text(t.get_text()))
    ]
    assert {BAD_MATH, MATH, LONE_DOLLAR} <= set(drawn)
    legend = ax.get_legend()
    assert legend is not None and [t.get_parse_math() for t in legend.get_texts()] == [False]
    # the log axis in plain numbers (`PlainLogFormatter`), not mathtext powers
    log_labels = [t.get_text() for t in log_ax.yaxis.get_ticklabels() if t.get_text()]
    assert "1,000" in log_labels and not any(is_math_text(label) for label in log_labels)
    assert all(t.get_parse_math() for t in log_ax.yaxis.get_ticklabels())


def test_characters_the_font_cannot_draw_show_as_escapes(tmp_path: Path) -> None:
    # a control character, a bidi override or a glyph DejaVu Sans lacks would draw as an
    # empty box (and matplotlib warns): they draw as their escapes, in titles, legends
    # and category ticks alike, and no warning is raised (the suite makes warnings errors)
    fig = figures_module.new_figure()
    ax = fig.subplots()
    title = ax.set_title(CONTROL)
    ax.bar([0, 1], [1, 2], label=CJK)
    ax.set_xticks([0, 1], [CONTROL, "表"])
    ax.legend()
    figures_module.save(fig, tmp_path / "f.png")
    shown = r"esc\x1b[31mred\x07 rtl\u202eevil"
    assert title.get_text() == shown
    legend = ax.get_legend()
    assert legend is not None and legend.get_texts()[0].get_text() == "\\u8868 😀"
    ticks = [t.get_text() for t in ax.xaxis.get_ticklabels()]
    assert ticks == [shown, "\\u8868"]
    assert figures_module._drawable("a\nb é") == "a\nb é"  # line breaks and accents stay


def test_markdown_heading_keeps_a_trailing_hash() -> None:
    # "## x #": a trailing # after a space is the heading's closing sequence, not text
    for text in ("x #", "x ##", "a#", "#", "# b #"):
        md = to_markdown([MdHeading(text, 2)])
        html_out = MarkdownIt("commonmark").render(md)
        assert html_out == f"<h2>{text}</h2>\n", (text, md)
    assert md_escape("$x$ and a lone $") == r"\$x\$ and a lone \$"
    assert md_escape("a\x1bb\u202ec") == "a\ufffdb\ufffdc"


# -- names a loader rejects -----------------------------------------------------------------


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("replay: error: "), err
    return err


def test_compare_rejects_a_system_name_that_cannot_name_a_folder(
    inputs: Inputs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # compare writes OUT/<system name>/: a name must be a safe folder name, so a hostile
    # one is refused before anything runs (replay run takes it: its folder is --out)
    capsys.readouterr()
    out = tmp_path / "out"
    argv = ["compare", str(inputs.trace), "--systems", f"hbm-lru,{inputs.system_file}",
            "--workers", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = _one_error_line(capsys)
    assert "cannot name a run folder" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "key", [SCRIPT.replace("/", ""), f"tiers.{HEADING}", f"tiers.{NEWLINE}", f"tiers.{CONTROL}"]
)
def test_sweep_rejects_a_grid_key_that_is_no_system_key(
    inputs: Inputs, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    # the error names the key (as a Python literal: a newline in it cannot break the
    # line, an escape sequence cannot reach the terminal)
    capsys.readouterr()
    out = tmp_path / "out"
    argv = ["sweep", str(inputs.trace), "--system", str(inputs.system_file),
            "--grid", f"{key}=1,2", "--workers", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = _one_error_line(capsys)
    assert "\x1b" not in err
    assert not out.exists()


def test_the_result_folders_hold_the_hostile_names(hostile: Hostile) -> None:
    # the folders the report read really have the hostile names (none was refused)
    folders = {p.name for p in hostile.results.iterdir()}
    assert {RUN_FOLDER, SWEEP_FOLDER, COMPARE_FOLDER, LONG_FOLDER, *MRC_FOLDERS} <= folders
    assert len(os.fsencode(LONG_FOLDER)) == 250
