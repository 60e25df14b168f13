"""One frontmatter reading: the forms Obsidian users write, read the same on every
machine (PMS has one stdlib reader; PyYAML, when installed, is never used by the engine)."""

import re
import sys

import pytest

import pms

# (frontmatter, what it means): the semantics PMS indexes (docs/notes.md, "Frontmatter").
FORMS = [
    ("title: Plain title", {"title": "Plain title"}),
    ("title: 'It''s quoted'", {"title": "It's quoted"}),
    ('title: "Quoted: \\"dq\\" \\u00e9"', {"title": 'Quoted: "dq" é'}),
    ("title: a # comment", {"title": "a"}),
    ("title: multi\n  line plain", {"title": "multi line plain"}),
    ("t: 'multi\n  line quoted'", {"t": "multi line quoted"}),
    ("description: >\n  folded text\n  over lines\n\n  second para\nnext: x",
     {"description": "folded text over lines\nsecond para\n", "next": "x"}),
    ("description: >-\n  folded\n  strip\nnext: x", {"description": "folded strip", "next": "x"}),
    ("body: |\n  line one\n  line two\n\n  after blank\nnext: 1",
     {"body": "line one\nline two\n\nafter blank\n", "next": "1"}),
    ("body: |-\n  keep\n   indented\nnext: y", {"body": "keep\n indented", "next": "y"}),
    ("aliases: yes", {"aliases": "yes"}),            # YAML 1.2: yes/no/on/off are words, not booleans
    ("on: off", {"on": "off"}),
    ("draft: true\npublish: False", {"draft": True, "publish": False}),
    ("n: ~\ne:\nnull_word: null", {"n": None, "e": None, "null_word": None}),
    ("num: 1.10\nint: 007\nrating: 4.5", {"num": "1.10", "int": "007", "rating": "4.5"}),  # as written
    ("date: 2024-01-02\ndt: 2024-01-02 10:30", {"date": "2024-01-02", "dt": "2024-01-02 10:30"}),
    ("tags: [a, b, 'c, d', \"e\"]", {"tags": ["a", "b", "c, d", "e"]}),
    ("tags:\n  - one\n  - two words\n  - 'q'", {"tags": ["one", "two words", "q"]}),
    ("tags:\n- same\n- indent", {"tags": ["same", "indent"]}),
    ("tags: [a,\n  b, c]", {"tags": ["a", "b", "c"]}),
    ("empty_list: []\nempty_map: {}", {"empty_list": [], "empty_map": {}}),
    ("author:\n  name: Ann\n  email: a@b.c\nafter: 1", {"author": {"name": "Ann", "email": "a@b.c"}, "after": "1"}),
    ("meta: {a: 1, b: [x, y]}", {"meta": {"a": "1", "b": ["x", "y"]}}),
    ("people:\n  - name: A\n    role: x\n  - name: B", {"people": [{"name": "A", "role": "x"}, {"name": "B"}]}),
    ("list:\n  - [a, b]\n  - - c\n    - d", {"list": [["a", "b"], ["c", "d"]]}),
    ("nested:\n  deeper:\n    deepest: z\n  back: b", {"nested": {"deeper": {"deepest": "z"}, "back": "b"}}),
    ("source: https://example.org/a:b#frag", {"source": "https://example.org/a:b#frag"}),
    ("key with spaces: v\n'quoted key': w", {"key with spaces": "v", "quoted key": "w"}),
    ("# a comment\ntitle: x", {"title": "x"}),
    ("base: &b [x, y]\ntags: *b", {"base": ["x", "y"], "tags": ["x", "y"]}),
    ("title: Emoji 🚀 ✓", {"title": "Emoji 🚀 ✓"}),
]


def pyyaml_core_reading(block: str):
    """PyYAML with the same rules (YAML 1.2's true/false/null, everything else text): the oracle."""
    yaml = pytest.importorskip("yaml", reason="PyYAML (requirements-dev.txt) is the reference reader")

    class Core(yaml.SafeLoader):  # type: ignore[name-defined,misc]  # imported by importorskip
        pass

    Core.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in pairs if tag.endswith(":merge")]
                                    for first, pairs in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Core.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    Core.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
    return yaml.load(block, Core)


@pytest.mark.parametrize("block,meaning", FORMS, ids=[f[0][:30] for f in FORMS])
def test_each_frontmatter_form_has_one_meaning(block, meaning):
    assert pms.parse_frontmatter(block) == meaning


@pytest.mark.parametrize("block,meaning", FORMS, ids=[f[0][:30] for f in FORMS])
def test_the_reading_equals_a_full_yaml_parser_with_the_same_rules(block, meaning):
    assert pyyaml_core_reading(block) == meaning


def test_the_reading_is_the_same_with_pyyaml_blocked(monkeypatch):
    with_yaml = [pms.parse_frontmatter(block) for block, _ in FORMS]
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ImportError
    assert [pms.parse_frontmatter(block) for block, _ in FORMS] == with_yaml


def test_what_is_indexed_from_the_forms(kb, tmp_path):
    """aliases: yes is the alias "yes"; a folded description is searchable text in the fields."""
    root = tmp_path / "vault"
    root.mkdir()
    (root / "a.md").write_text("---\naliases: yes\ndescription: >\n  folded words\n  here\ndate: 2024-01-02\n"
                               "draft: true\n---\n# A\n\nbody\n", encoding="utf-8")
    kb.collections.create(root, name="v")
    kb.sync()
    note = pms.notes.parse_note((root / "a.md").read_text(encoding="utf-8"), "a")
    assert note.aliases == ["yes"] and note.date == "2024-01-02"
    assert ("description", "folded words here") in pms.notes.frontmatter_fields(note.metadata)
    assert ("draft", "true") in pms.notes.frontmatter_fields(note.metadata)
    assert [h.path for h in kb.search("", where="draft=true")] == ["a.md"]
    assert [h.path for h in kb.search("", where="description=folded words here")] == ["a.md"]


def test_bad_frontmatter_is_read_as_far_as_it_goes():
    assert pms.parse_frontmatter("title: ok\nbad: [unclosed")["title"] == "ok"
    assert pms.parse_frontmatter("x: - not a list\na: b: c") == {"x": "- not a list", "a": "b: c"}
    assert pms.parse_frontmatter("just some text\n  and more") == {}
    assert pms.parse_frontmatter("k: " + "[" * 500) is not None  # deep nesting is bounded, not a RecursionError
