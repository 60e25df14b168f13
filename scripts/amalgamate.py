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

The engine (everything after the docstring) is one raw string in pms.py, ENGINE_NAME,
followed by a few lines (BOOTSTRAP) that compile it and keep the compiled code in
``__pycache__`` beside pms.py, as Python keeps a module's: Python compiles a script's
whole text before running its first line and never caches it, and compiling ~600 KB
is most of what ``python3 pms.py search`` costs (docs/decisions.md). The string's lines
are the file's lines, so line numbers, tracebacks and --where hold as before.

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
    "vector_memory", "embedding", "query", "ranking", "retrieval", "sync", "watch", "clip", "api", "evaluation", "mcp_server", "cli",
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


ENGINE_NAME = "_ENGINE"  # BOOTSTRAP and install_command (src/pms/cli.py) name it too
# After the engine's string: compile it, or load what an earlier run compiled from this very text.
# Standard library only; any failure to read or write the cache means compiling, never an error.
BOOTSTRAP = """\
'''
_ENGINE_LINE = FIRST_LINE  # the line the string opens on: compiled, its lines keep their numbers in this file


def _engine_code(write: bool = not sys.dont_write_bytecode):
    \"\"\"The engine's code: from __pycache__ when this Python compiled this very text before, else
    compiled, and kept there when ``write`` (Python's -B and PYTHONDONTWRITEBYTECODE say not to;
    setup's pms command writes it all the same, as it writes pms.py's bytecode).\"\"\"
    import marshal
    import os
    import zlib

    path = os.path.abspath(__file__)
    key = f"{sys.version}|{zlib.crc32(_ENGINE.encode('utf-8', 'surrogatepass'))}\\n".encode()
    folder, name = os.path.split(os.path.splitext(path)[0])
    if sys.pycache_prefix:  # PYTHONPYCACHEPREFIX: one tree of caches mirroring the source folders
        cache_folder = os.path.join(sys.pycache_prefix, os.path.splitdrive(folder)[1].lstrip(os.sep))
    else:
        cache_folder = os.path.join(folder, "__pycache__")
    tag = sys.implementation.cache_tag  # None: this Python caches no bytecode
    cache = os.path.join(cache_folder, f"{name}.engine.{tag}.pyc") if tag else ""
    try:
        with open(cache, "rb") as f:
            data = f.read()
        if data.startswith(key):
            code = marshal.loads(data[len(key):])
            import _imp  # as importlib does: the code names this file even if compiled where it was before a move

            _imp._fix_co_filename(code, path)
            return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile("\\n" * (_ENGINE_LINE - 1) + _ENGINE, path, "exec", dont_inherit=True)
    if cache and write:
        partial = f"{cache}.{os.getpid()}"
        try:
            os.makedirs(cache_folder, exist_ok=True)
            with open(partial, "wb") as f:
                f.write(key + marshal.dumps(code))
            os.replace(partial, cache)
        except OSError:
            pass
    return code


exec(_engine_code(), globals())
"""


def amalgamation(package: Path = PACKAGE) -> str:
    """The text of pms.py, made from ``package``: the head, then the engine as the string ENGINE_NAME, then BOOTSTRAP."""
    missing = sorted({p.stem for p in package.glob("*.py")} - {*MODULES, "__init__", "__main__"})
    if missing:
        raise SystemExit(f"amalgamate: src/pms/{missing[0]}.py is in no layer: add it to MODULES in {Path(__file__).name}")
    head, tail = split_init((package / "__init__.py").read_text(encoding="utf-8"))
    docstring_end = ast.parse("\n".join(head)).body[0].end_lineno or 0
    out = [SHEBANG, *head[:_after_comments(head)], *GENERATED.split("\n"), *head[_after_comments(head):docstring_end],
           "", "import sys", "", f"{ENGINE_NAME} = r'''"]
    first_line = len(out) + 1  # the engine's first line; the string opens on the line before
    out += head[docstring_end:]
    for name in (*MODULES, "__init__", "__main__"):
        source = (package / f"{name}.py").read_text(encoding="utf-8")
        lines = tail if name == "__init__" else commented(source)
        first = len(source.split("\n")) - len(tail) + 1 if name == "__init__" else 1
        out.append(f"# ---- pms/{name}.py (+{len(out) + 2 - first}) ----")
        out += lines
    engine = "\n".join(out[first_line - 1:]).rstrip("\n")
    if "'''" in engine or engine.endswith("\\"):
        raise SystemExit("amalgamate: the engine holds ''' or ends with a backslash, so it cannot be one raw string")
    return "\n".join(out[:first_line - 1]) + "\n" + engine + "\n" + BOOTSTRAP.replace("FIRST_LINE", str(first_line - 1))


def engine(text: str) -> str:
    """The engine's source in pms.py's ``text``, as BOOTSTRAP compiles it: its lines at their line numbers in pms.py."""
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [ENGINE_NAME]:
            return "\n" * (node.lineno - 1) + ast.literal_eval(node.value)
    raise ValueError(f"no {ENGINE_NAME} in the text")


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
