"""The layering, checked on the source: gui/, build/, bench/ and scripts/ use only
the names pms.__all__ exports (and no KnowledgeBase internals); the package's modules
import only the layers below them, as each one's docstring says; pms.py is what the
package makes, one definition per name."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pms
from conftest import REPO
from scripts import amalgamate

CLIENT_FOLDERS = ("gui", "build", "bench", "scripts")
# KnowledgeBase attributes that are internals: clients use the public methods
# and properties (index_path, embeddings_enabled, search_mode(), status()).
KB_INTERNALS = {"store", "retrieval", "embedder", "db_path"}
PACKAGE = REPO / "src" / "pms"
# A module's docstring names the modules it may import: "May import: config, markdown."
MAY_IMPORT = re.compile(r"^May import: (?P<names>[^.]*)\.", re.M)


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
    for name in ("KnowledgeBase", "PMSError", "markdown_passages", "Hit", "SyncReport", "SearchMode"):
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


def package_imports(source: str) -> set[str]:
    """The sibling modules a module imports (``from .store import Store``), at any depth."""
    return {node.module.split(".")[0] for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}


def declared_imports(source: str) -> set[str] | None:
    """What the module's docstring says it may import (None: it does not say)."""
    match = MAY_IMPORT.search(ast.get_docstring(ast.parse(source)) or "")
    if match is None:
        return None
    names = " ".join(match["names"].split())
    return set() if names.startswith("the standard library") else {n.strip() for n in names.split(",")}


@pytest.mark.parametrize("module", amalgamate.MODULES)
def test_each_module_imports_only_the_layers_below_it_as_its_docstring_says(module):
    source = (PACKAGE / f"{module}.py").read_text(encoding="utf-8")
    below = set(amalgamate.MODULES[: amalgamate.MODULES.index(module)])
    imported = package_imports(source)
    assert imported <= below, f"{module} imports a layer above it: {sorted(imported - below)} (order: amalgamate.MODULES)"
    declared = declared_imports(source)
    assert declared is not None, f"{module}'s docstring has no 'May import: ...' line"
    assert imported == declared, f"{module} imports {sorted(imported)} but its docstring says {sorted(declared)}"


def test_every_module_has_a_layer():
    assert sorted(amalgamate.MODULES) == sorted(p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("__"))


def test_a_layer_violation_is_found():
    """The checker itself: an import at any depth, and the docstring's list."""
    source = '"""A module.\n\nMay import: config, store.\n"""\nfrom .config import X\ndef f():\n    from .api import K\n'
    assert package_imports(source) == {"config", "api"} and declared_imports(source) == {"config", "store"}
    assert declared_imports('"""Base.\n\nMay import: the standard library only.\n"""') == set()


def test_only_the_cli_imports_the_desktop_app():
    importers = [p.name for p in sorted(PACKAGE.glob("*.py")) if any(
        isinstance(node, (ast.Import, ast.ImportFrom)) and "gui" in ((node.module or "") if isinstance(node, ast.ImportFrom)
                                                                     else " ".join(a.name for a in node.names)).split(".")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
    assert importers == ["cli.py"]


def test_pms_py_is_what_the_package_makes():
    assert (REPO / "pms.py").read_text(encoding="utf-8") == amalgamate.amalgamation(), \
        "pms.py is stale: run python3 scripts/amalgamate.py"


def test_a_line_of_pms_py_leads_back_to_its_module():
    text = amalgamate.amalgamation()
    lines = text.split("\n")
    number = next(i for i, line in enumerate(lines, 1) if line.startswith("def fuse("))
    module, line = amalgamate.where(number, text).split(":")
    assert module == "src/pms/ranking.py"
    assert (REPO / module).read_text(encoding="utf-8").split("\n")[int(line) - 1].startswith("def fuse(")


def prints_outside_the_cli(source: str) -> list[str]:
    """print() and sys.stdout/sys.stderr calls in a module, outside the cmd_* functions
    (commands defined with their feature)."""
    found = []
    for node in ast.parse(source).body:
        if getattr(node, "name", "").startswith("cmd_"):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call):
                called = ast.unparse(inner.func)
                if called == "print" or called.startswith(("sys.stderr", "sys.stdout")):
                    found.append(f"line {inner.lineno}: {called}(...) in {getattr(node, 'name', '?')}")
    return found


@pytest.mark.parametrize("module", [m for m in amalgamate.MODULES if m != "cli"])
def test_library_code_reports_through_callbacks_never_print(module):
    """The desktop app and API users see news only through callbacks (notice, progress)."""
    assert prints_outside_the_cli((PACKAGE / f"{module}.py").read_text(encoding="utf-8")) == []


def test_a_print_is_found():
    assert prints_outside_the_cli("def run():\n    print('waiting')\ndef cmd_x():\n    print('ok')\n") == ["line 2: print(...) in run"]


def redefined_names(source: str) -> list[str]:
    """Module-level functions, classes and assignments defined twice: in pms.py, where every
    module shares one namespace, the later one silently replaces the earlier for every caller."""
    seen: dict[str, int] = {}
    twice = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        for name in names:
            if name in seen and name != "TYPE_CHECKING":  # each module's own "TYPE_CHECKING = False"
                twice.append(f"{name}: lines {seen[name]} and {node.lineno}")
            seen[name] = node.lineno
    return twice


def test_pms_py_defines_each_name_once():
    text = amalgamate.amalgamation()
    assert redefined_names(amalgamate.engine(text)) == []
    assert redefined_names(text) == []  # the lines around the engine's string


def test_a_redefinition_is_found():
    assert redefined_names("def f():\n    pass\n\n\ndef f():\n    pass\n") == ["f: lines 1 and 5"]
    assert redefined_names("LIMIT = 1\nTYPE_CHECKING = False\nTYPE_CHECKING = False\nLIMIT = 2\n") == ["LIMIT: lines 1 and 4"]
