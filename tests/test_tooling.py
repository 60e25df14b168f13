"""The repository's tooling: annotations that resolve, the version, the changelog, the lint settings."""
from __future__ import annotations

import inspect
import re
import subprocess
import typing

import pytest

import pms
from conftest import REPO, STDLIB_PYTHON


def test_every_public_annotation_resolves_at_run_time():
    """typing.get_type_hints works on the API (annotations name nothing undefined)."""
    assert typing.get_type_hints(pms.KnowledgeBase.search)["return"] is pms.SearchResult
    for name in pms.__all__:
        obj = getattr(pms, name)
        members = [obj] if callable(obj) else []
        if inspect.isclass(obj):
            members += [m for _, m in inspect.getmembers(obj, inspect.isfunction) if m.__qualname__.startswith(obj.__name__)]
        for member in members:
            typing.get_type_hints(member)  # raises NameError on an unresolvable name


@pytest.mark.stdlib
@pytest.mark.parametrize("folder", ["src", "."], ids=["package", "pms.py"])
def test_loading_pms_leaves_typing_and_dataclasses_unloaded(folder):
    """Record and named_tuple stand in for dataclasses and NamedTuple (mypy reads them through
    dataclass_transform): importing either module slows every start by a third."""
    probe = f"import sys; sys.path.insert(0, {str(REPO / folder)!r}); import pms; print(sorted({{'typing', 'dataclasses'}} & set(sys.modules)))"
    out = subprocess.run([STDLIB_PYTHON, "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_version_has_its_changelog_entry():
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## Unreleased" in changelog and f"## {pms.__version__}\n" in changelog


def test_the_linters_are_pinned_and_configured():
    pins = (REPO / "requirements-dev.txt").read_text(encoding="utf-8")
    assert re.search(r"^ruff==", pins, re.M) and re.search(r"^mypy==", pins, re.M)
    assert "[tool.ruff" in (REPO / "pyproject.toml").read_text(encoding="utf-8")