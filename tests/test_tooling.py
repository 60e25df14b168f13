"""The repository's tooling: annotations that resolve, the version, the changelog, the lint settings."""
from __future__ import annotations

import inspect
import re
import typing

import pms
from conftest import REPO


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


def test_records_are_dataclass_like_to_type_checkers_without_typing_at_run_time():
    source = (REPO / "pms.py").read_text(encoding="utf-8")
    assert "@dataclass_transform()\nclass Record:" in source and "@dataclass_transform()\ndef named_tuple(" in source
    assert re.search(r"^if TYPE_CHECKING:\n(    .*\n|\n)*?    from typing_extensions import dataclass_transform", source, re.M)
    assert not re.search(r"^(import typing|from typing import)", source, re.M)  # typing stays out of the start


def test_the_version_has_its_changelog_entry():
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## Unreleased" in changelog and f"## {pms.__version__}\n" in changelog


def test_the_test_command_lints_and_type_checks_first():
    script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert script.index("-m ruff check") < script.index("-m mypy") < script.index("-m pytest")
    pins = (REPO / "requirements-dev.txt").read_text(encoding="utf-8")
    assert re.search(r"^ruff==", pins, re.M) and re.search(r"^mypy==", pins, re.M)
    assert "[tool.ruff" in (REPO / "pyproject.toml").read_text(encoding="utf-8")
