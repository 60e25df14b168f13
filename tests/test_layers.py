"""The layering, checked on the source: gui/, build/, bench/ and scripts/ use only
the names pms.__all__ exports (and no KnowledgeBase internals), and pms.py's
sections never use a name defined in a later section."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pms
from conftest import REPO

CLIENT_FOLDERS = ("gui", "build", "bench", "scripts")
# KnowledgeBase attributes that are internals: clients use the public methods
# and properties (index_path, embeddings_enabled, search_mode(), status()).
KB_INTERNALS = {"store", "retrieval", "embedder", "db_path"}
# A section header in pms.py: "# Name ####...." under a line of "#".
SECTION = re.compile(r"^# (?P<name>[^#].*?) #{3,}$")
# Names a section may use from a later one, each with the reason it cannot be
# avoided. None today: the clipping section takes folders and globs, and
# Collection.clip (API) drives it.
ALLOWED_FORWARD: dict[str, str] = {}


def client_files() -> list[Path]:
    files = []
    for folder in CLIENT_FOLDERS:
        files += [p for p in sorted((REPO / folder).rglob("*")) if p.suffix in (".py", ".spec") and "__pycache__" not in p.parts]
    return files


def pms_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) for every pms.<name> and `from pms import <name>` in a module, at
    any depth (imports inside functions too), in quoted annotations ("pms.Store"), and
    every getattr(pms, "name"). A module named pms reached any other way
    (`from common import pms`) counts."""
    aliases = {"pms"}
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "pms" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "pms":
            uses += [(node.lineno, a.name) for a in node.names]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            uses.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in aliases):
            name = node.args[1]
            uses.append((node.lineno, str(name.value) if isinstance(name, ast.Constant) else "<computed name>"))
        for annotation in annotations_of(node):
            if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
                try:
                    quoted = ast.parse(annotation.value, mode="eval")
                except SyntaxError:
                    continue
                uses += [(getattr(node, "lineno", 0), attr.attr) for attr in ast.walk(quoted) if isinstance(attr, ast.Attribute)
                         and isinstance(attr.value, ast.Name) and attr.value.id in aliases]
    return uses


def annotations_of(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
        return [a.annotation for a in every if a.annotation] + ([node.returns] if node.returns else [])
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


# Client files that may speak SQL to an index file themselves, each with its reason; every
# other client goes through the API (a query, a status, a count are all there).
RAW_SQL_ALLOWED = {
    "bench/faults.py": "checks the index file as any SQLite tool sees it (integrity, FTS5, foreign keys, a clean build "
                       "compared row by row): the engine under test must not be the judge of its own file",
    "bench/mcp_bench.py": "serves a copy made with SQLite's backup API and counts notes read-only, so a cached index "
                          "shared by several checkouts is never migrated by the bench",
    "bench/perf.py": "weighs the file by table (dbstat) after folding the WAL, and builds what-if copies for the size study",
    "bench/scale.py": "writes synthetic vectors straight into a generated index (100k and 1M, no model) and reads them "
                      "all back to compare the ANN graph with exact search",
    "build/pms.spec": "asks the build's Python whether its sqlite3 loads extensions (no index involved)",
}


def raw_sql(tree: ast.AST) -> list[str]:
    """Imports of sqlite3 / sqlean and SQL statements passed to .execute()."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in ("sqlite3", "sqlean") for a in node.names):
            found.append(f"line {node.lineno}: import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("sqlite3", "sqlean"):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("execute", "executemany", "executescript"):
            found.append(f"line {node.lineno}: .{node.func.attr}(...)")
    return found


@pytest.mark.parametrize("path", client_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_clients_speak_no_sql_to_the_index(path):
    rel = path.relative_to(REPO).as_posix()
    found = raw_sql(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    if rel in RAW_SQL_ALLOWED:
        assert found, f"{rel} no longer needs its RAW_SQL_ALLOWED entry"
    else:
        assert found == [], f"{rel} reads the index with its own SQL; use the API (pms.__all__)"


def test_pms_declares_its_public_names():
    assert len(pms.__all__) == len(set(pms.__all__))
    missing = [name for name in pms.__all__ if not hasattr(pms, name)]
    assert missing == []
    for name in ("KnowledgeBase", "PMSError", "chunk_markdown", "Hit", "SyncReport", "SearchMode"):
        assert name in pms.__all__


@pytest.mark.parametrize("path", client_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_clients_use_only_exported_names(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    private = [f"line {line}: pms.{name}" for line, name in pms_uses(tree) if name not in pms.__all__]
    assert private == [], f"{path.name} uses names that are not in pms.__all__"


@pytest.mark.parametrize("path", client_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_clients_do_not_reach_into_knowledgebase_internals(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    reads = [f"line {node.lineno}: .{node.attr}" for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in KB_INTERNALS]
    assert reads == [], f"{path.name} reads KnowledgeBase internals"


def test_the_checks_see_private_names():
    """The scanner itself: a private name, an alias, a `from` import, an import inside a
    function, a quoted annotation and getattr are all seen; so is SQL."""
    tree = ast.parse("import pms as p\nfrom pms import _hidden\np._fmt_eta(1)\nfrom common import pms\npms.Store\n"
                     "def f(kb: 'pms.Retrieval') -> 'p._Row':\n    from pms import _inner\n    return getattr(pms, '_SECRET')\n")
    assert sorted(name for _, name in pms_uses(tree)) == ["Retrieval", "Store", "_Row", "_SECRET", "_fmt_eta", "_hidden", "_inner"]
    sql = ast.parse("import sqlite3\ndef g(db):\n    return sqlite3.connect(db).execute('SELECT 1')\n")
    assert len(raw_sql(sql)) == 2


def pms_source() -> str:
    return (REPO / "pms.py").read_text(encoding="utf-8")


def sections(source: str) -> list[tuple[int, str]]:
    """(first line, name) of each section, in order."""
    lines = source.split("\n")
    return [(i + 1, m["name"]) for i, line in enumerate(lines) if (m := SECTION.match(line)) and lines[i - 1].startswith("####")]


def forward_references(source: str) -> list[str]:
    tree = ast.parse(source)
    starts = sections(source)

    def section_of(line: int) -> int:
        return max(i for i, (start, _) in enumerate(starts) if start <= line) if line >= starts[0][0] else -1

    defined: dict[str, int] = {}
    for node in tree.body:
        targets = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        for name in targets:
            defined.setdefault(name, section_of(node.lineno))

    found = []
    for node in tree.body:
        here = section_of(node.lineno)
        if here < 0:
            continue  # the preamble: imports and __all__, which names the public API by design
        for inner in ast.walk(node):
            names = []
            if isinstance(inner, ast.Name):
                names = [inner.id]
            elif isinstance(inner, ast.Constant) and isinstance(inner.value, str) and re.fullmatch(r"[A-Z]\w+", inner.value):
                names = [inner.value]  # a quoted annotation such as "KnowledgeBase"
            for name in names:
                there = defined.get(name, -1)
                if there > here and name not in ALLOWED_FORWARD:
                    found.append(f"line {getattr(inner, 'lineno', node.lineno)}: {starts[here][1]!r} uses {name} "
                                 f"from the later section {starts[there][1]!r}")
    return found


def test_pms_sections_read_top_to_bottom():
    names = [name.split(":")[0] for _, name in sections(pms_source())]
    assert names[:3] == ["Config", "Markdown", "Store"] and names[-1] == "CLI"
    assert forward_references(pms_source()) == []


def test_a_forward_reference_is_found():
    """The checker itself, on a two-section module: a call and a quoted annotation."""
    banner = "#" * 20
    source = (f"{banner}\n# Low ####\n{banner}\ndef low(kb: 'High'):\n    return high()\n"
              f"{banner}\n# High ####\n{banner}\nclass High: pass\ndef high():\n    return low(None)\n")
    found = forward_references(source)
    assert len(found) == 2 and all("'Low' uses" in f for f in found)
    assert {f.split(" uses ")[1].split(" ")[0] for f in found} == {"High", "high"}


def prints_outside_the_cli(source: str) -> list[str]:
    """print() and sys.stdout/sys.stderr calls outside the CLI section and the
    cmd_* functions (commands defined with their feature, like cmd_bench)."""
    tree = ast.parse(source)
    starts = sections(source)
    cli = next(start for start, name in starts if name == "CLI")
    found = []
    for node in tree.body:
        if node.lineno >= cli or getattr(node, "name", "").startswith("cmd_"):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call):
                called = ast.unparse(inner.func)
                if called == "print" or called.startswith(("sys.stderr", "sys.stdout")):
                    found.append(f"line {inner.lineno}: {called}(...) in {getattr(node, 'name', '?')}")
    return found


def test_library_code_reports_through_callbacks_never_print():
    """The desktop app and API users see news only through callbacks (notice, progress)."""
    assert prints_outside_the_cli(pms_source()) == []
    banner = "#" * 20
    probe = f"{banner}\n# Sync ####\n{banner}\ndef run():\n    print('waiting')\n{banner}\n# CLI ####\n{banner}\ndef cmd_x():\n    print('ok')\n"
    assert prints_outside_the_cli(probe) == ["line 5: print(...) in run"]


def redefined_names(source: str) -> list[str]:
    """Module-level functions and classes defined twice: the later one silently
    replaces the earlier for every caller (two sections each wrote a _one_line)."""
    seen: dict[str, int] = {}
    twice = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in seen:
                twice.append(f"{node.name}: lines {seen[node.name]} and {node.lineno}")
            seen[node.name] = node.lineno
    return twice


def test_pms_defines_each_function_and_class_once():
    assert redefined_names(pms_source()) == []


def test_a_redefinition_is_found():
    assert redefined_names("def f():\n    pass\n\n\ndef f():\n    pass\n") == ["f: lines 1 and 5"]
