#!/usr/bin/env python3
"""Write pms.py, the one file users download, from the package in src/pms/.

    python3 scripts/amalgamate.py            # (re)write pms.py
    python3 scripts/amalgamate.py --check    # exit 1 when pms.py is not what the package makes (CI)
    python3 scripts/amalgamate.py --where 5230   # which module and line pms.py's line 5230 comes from

As SQLite's amalgamation is made from its source files: the modules are concatenated in
their layer order (MODULES, bottom first), each under a banner that names it and its line
offset (``# ---- pms/ranking.py (+5013) ----``: pms.py's line N is the module's line
N - 5013, so a traceback's line number leads back to the source). Nothing is rewritten
but the lines that only make sense in a package: a module's own ``from __future__``
line and its imports of sibling modules (``from .store import Store``), which become
comments, since in one file every name is already there. Each module keeps its line
count, so the offset holds for every line. ``__init__.py`` gives the head (the script
metadata, the docstring, the garbage-collector switch) before the modules and its
remaining lines (``__all__``) after them; ``__main__.py`` ends the file.

Standard library only, Python >= 3.10 (the README's first command may run it).
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "src" / "pms"
TARGET = REPO / "pms.py"

# The layers, bottom first: a module imports only modules before it (tests/test_layers.py
# checks this and each module's "May import" line). The amalgamation follows this order.
MODULES = (
    "config", "outbound", "frontmatter", "markdown", "language", "notes", "pdf", "paths", "filters", "schema", "store",
    "embedding", "query", "ranking", "retrieval", "sync", "watch", "clip", "api", "evaluation", "mcp_server", "cli",
)
SHEBANG = "#!/usr/bin/env python3"
GENERATED = ("# GENERATED FILE: made from the modules in src/pms/ by scripts/amalgamate.py. Edit those and run it;\n"
             "# a '# ---- pms/NAME.py (+N) ----' line starts each module: this file's line L is its line L - N.")


def package_only_lines(source: str) -> dict[int, str]:
    """Line number (1-based) -> what the line becomes, for the lines that only a package
    needs: ``from __future__`` and relative imports, at any depth. A relative import
    inside a block becomes ``pass`` (its block may hold nothing else)."""
    lines = source.split("\n")
    changed: dict[int, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or not (node.level or node.module == "__future__"):
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        indent = lines[first - 1][: node.col_offset]
        for number in range(first, last + 1):
            text = lines[number - 1][len(indent):] if number == first else lines[number - 1].strip()
            changed[number] = (f"{indent}pass  # {text}" if number == first and indent else f"{indent}# {text}")
    return changed


def commented(source: str, keep: range | None = None) -> list[str]:
    """The module's lines with its package-only lines made comments (``keep``: lines left as they are)."""
    changed = package_only_lines(source)
    return [changed.get(number, line) if keep is None or number not in keep else line
            for number, line in enumerate(source.split("\n"), 1)]


def split_init(source: str) -> tuple[list[str], list[str]]:
    """``__init__.py`` as (head, tail): the head ends before its first import of a module."""
    tree = ast.parse(source)
    first = next(node.lineno for node in tree.body if isinstance(node, ast.ImportFrom) and node.level)
    lines = source.split("\n")
    return lines[: first - 1], commented(source)[first - 1:]


def amalgamation(package: Path = PACKAGE) -> str:
    """The text of pms.py, made from ``package``."""
    missing = sorted({p.stem for p in package.glob("*.py")} - {*MODULES, "__init__", "__main__"})
    if missing:
        raise SystemExit(f"amalgamate: src/pms/{missing[0]}.py is in no layer: add it to MODULES in {Path(__file__).name}")
    head, tail = split_init((package / "__init__.py").read_text(encoding="utf-8"))
    out = [SHEBANG, *head[:_after_comments(head)], *GENERATED.split("\n"), *head[_after_comments(head):]]
    for name in (*MODULES, "__init__", "__main__"):
        source = (package / f"{name}.py").read_text(encoding="utf-8")
        lines = tail if name == "__init__" else commented(source)
        first_line = len(source.split("\n")) - len(tail) + 1 if name == "__init__" else 1
        out.append(f"# ---- pms/{name}.py (+{len(out) + 2 - first_line}) ----")
        out += lines
    return "\n".join(out).rstrip("\n") + "\n"


def _after_comments(lines: list[str]) -> int:
    """Where the leading comment block (the script metadata) ends."""
    return next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))


def where(line: int, text: str) -> str:
    """``pms/module.py:LINE`` for a line of the amalgamation ``text``."""
    banner = None
    for number, content in enumerate(text.split("\n")[:line], 1):
        if content.startswith("# ---- pms/") and content.endswith(") ----"):
            banner = (content.split()[2], int(content.rsplit("+", 1)[1].split(")")[0]), number)
    if banner is None:
        return f"pms.py:{line} is in the head, from src/pms/__init__.py's first lines"
    name, offset, at = banner
    return f"src/{name}:{line - offset}" if line > at else f"pms.py:{line} is the banner of {name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if pms.py is stale (do not write it)")
    parser.add_argument("--where", type=int, metavar="LINE", help="the module and line that pms.py's LINE comes from")
    args = parser.parse_args(argv)
    text = amalgamation()
    if args.where:
        print(where(args.where, text))
        return 0
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    if args.check:
        if current != text:
            print(f"pms.py is stale: it is not what src/pms/ makes; run: python3 scripts/{Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET.name} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
