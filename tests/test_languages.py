"""The vault's languages: counted at sync (note_language), shown by status, and the
advice (or, for a new index with no model chosen, the pick) of a multilingual model."""
from __future__ import annotations

import pytest
from conftest import FakeServer, ranked, write

import pms

SAMPLES = {
    "en": "How to keep the notes in sync between the laptop and the phone, and what to do when both change.",
    "ru": "Как синхронизировать заметки между ноутбуком и телефоном, и что делать, если оба изменились.",
    "uk": "Як синхронізувати нотатки між ноутбуком і телефоном, і що робити, якщо обидва змінилися.",
    "de": "Wie man die Notizen zwischen Laptop und Telefon synchron hält, und was zu tun ist, wenn sich beide ändern.",
    "es": "Cómo mantener las notas sincronizadas entre el portátil y el teléfono, y qué hacer cuando cambian los dos.",
    "fr": "Comment garder les notes synchronisées entre le portable et le téléphone, et que faire quand les deux changent.",
    "zh": "如何在笔记本电脑和手机之间同步笔记，以及两边都修改时该怎么办。",
    "ja": "ノートパソコンとスマートフォンの間でノートを同期する方法と、両方が変更されたときの対処法。",
    "ko": "노트북과 휴대폰 사이에서 노트를 동기화하는 방법과 둘 다 바뀌었을 때 해야 할 일.",
    "ar": "كيفية مزامنة الملاحظات بين الحاسوب المحمول والهاتف، وما يجب فعله عندما يتغير كلاهما في نفس الوقت.",
    "hi": "लैपटॉप और फ़ोन के बीच नोट्स को सिंक में कैसे रखें, और जब दोनों बदल जाएँ तो क्या करें।",
}


@pytest.mark.parametrize("lang", sorted(SAMPLES))
def test_note_language(lang):
    assert pms.language.note_language(SAMPLES[lang]) == lang


def test_code_and_commands_do_not_hide_the_language():
    note = "# tar\n\n> Архиватор.\n\n- Создать архив из файлов:\n\n`tar cf {{target.tar}} {{file1 file2 file3}}`\n"
    assert pms.language.note_language(note) == "ru"
    assert pms.language.note_language("# tar\n\n- 创建归档：\n\n`tar cf {{target.tar}} {{file1 file2 file3}}`\n") == "zh"
    assert pms.language.note_language("ok") == "und"


def test_a_query_too_short_for_its_language_still_shows_its_script():
    written = pms.language.written_in_script_of
    assert pms.language.note_language("все логи") == "und"  # too few letters to tell
    assert not written("все логи", "en") and written("все логи", "ru") and written("логи", "uk")
    assert written("list files", "en") and written("list files", "de") and not written("list files", "ru")
    assert written("列出文件", "zh") and written("列出文件", "ja") and not written("列出文件", "ko")
    assert written("git ログ", "ja")  # a command in Latin beside the Japanese: Kana's share decides
    assert written("42", "ru") and written("", "en")  # no letters: nothing says otherwise


def test_web_addresses_are_not_words_of_a_language():
    # The Rust book's list of its translations: "com" of github.com is a Portuguese word.
    links = "\n".join(f"- [Translation {i}](https://github.com/team{i}/book), www.example{i}.com" for i in range(12))
    note = f"## Translations of the Book\n\nFor resources in languages other than English, see the list.\n\n{links}\n"
    assert pms.language.note_language(note) == "en"
    assert pms.language.note_language(note.replace("https://", "").replace("www.", "")) == "pt"  # as plain words, "com" still is


def vault(root, counts):
    for lang, n in counts.items():
        for i in range(n):
            write(root / f"{lang}{i}.md", f"# {lang} {i}\n\n{SAMPLES[lang]}\n")
    return root


def test_status_counts_languages_and_advises_a_multilingual_model(tmp_path, db_path, pms_main):
    vault(tmp_path / "v", {"en": 6, "ru": 2, "zh": 1})
    result = pms_main("collection", "add", str(tmp_path / "v"), "--no-embed", db=db_path)
    assert "multilingual" in result.stderr, "the advice follows the sync that found the languages"
    assert "multilingual" not in pms_main("sync", db=db_path).stderr, "said once"
    with pms.KnowledgeBase(db_path, embeddings=False) as kb:
        info = kb.status(pending=False)
        assert info["languages"] == {"en": 6, "ru": 2, "zh": 1}
        assert "3 of 9 notes are not in English (Russian 2, Chinese 1)" in info["language_advice"]
        assert "--embed-url" in info["language_advice"]
    status = pms_main("status", db=db_path).stdout
    assert "Languages:   English 6, Russian 2, Chinese 1" in status and "Advice:" in status
    assert pms.embedding.language_advice({"en": 6, "ru": 3}, "multilingual-e5-small") is None
    assert pms.embedding.language_advice({"en": 9, "ru": 1}, "all-MiniLM-L6-v2") is None  # 10 %: no advice


def test_an_edit_changes_the_count(tmp_path, kb):
    root = vault(tmp_path / "v", {"en": 3, "de": 2})
    kb.collections.create(root, name="v")
    kb.sync()
    write(root / "en0.md", f"# de\n\n{SAMPLES['de']}\n")
    kb.sync()
    assert kb.status(pending=False)["languages"] == {"de": 3, "en": 2}


def test_first_sync_picks_a_multilingual_model_when_most_notes_are_not_english(tmp_path, db_path):
    vault(tmp_path / "v", {"en": 1, "ru": 3, "ko": 2})
    told = []
    # Nothing chooses a model (no PMS_MODEL*, no server): the first sync may pick one; no download here.
    with pms.KnowledgeBase(db_path, allow_download=False, notice=told.append) as kb:
        kb.collections.create(tmp_path / "v", name="v")
        kb.sync()
        assert kb.status(pending=False)["embedding_provider"]["model"] == pms.embedding.MULTILINGUAL_MODEL
        assert any("5 of 6 notes are not in English" in t for t in told)


def test_first_sync_keeps_the_default_for_an_english_vault_or_a_chosen_model(tmp_path, db_path, monkeypatch):
    vault(tmp_path / "v", {"en": 4, "ru": 2})
    with pms.KnowledgeBase(db_path, allow_download=False) as kb:
        default = kb.status(pending=False)["embedding_provider"]["model"]
        kb.collections.create(tmp_path / "v", name="v")
        kb.sync()
        assert kb.status(pending=False)["embedding_provider"]["model"] == default != pms.embedding.MULTILINGUAL_MODEL
    vault(tmp_path / "w", {"ru": 5})
    with pms.KnowledgeBase(tmp_path / "chosen.sqlite", model="BAAI/bge-small-en-v1.5", allow_download=False) as kb:
        kb.collections.create(tmp_path / "w", name="w")
        kb.sync()
        assert kb.status(pending=False)["embedding_provider"]["model"] == "BAAI/bge-small-en-v1.5"


def test_the_multilingual_dev_sets(shared_data, tmp_path):
    import collections
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    import suite

    folder, judgments = suite.mlmixed(tmp_path / "mixed")
    langs = suite.QUERY_GROUPS["mlmixed"]
    assert collections.Counter(langs) == {lang: suite.ML_QUERIES_PER_LANGUAGE for lang in suite.ML_LANGUAGES}
    for judgment, lang in zip(judgments, langs):
        own = folder / next(iter(judgment.relevant))
        assert own.parent.name == lang and (folder / "en" / own.name).exists()
        captions = [suite._caption(line) for line in own.read_text(encoding="utf-8").splitlines() if line.startswith("- ")]
        assert judgment.query not in captions, "the caption queried is hidden from its own page"
    folder, judgments = suite.mlcross(tmp_path / "cross")
    assert all((folder / target).exists() for j in judgments for target in j.relevant)
    assert {pms.language.note_language((folder / next(iter(j.relevant))).read_text(encoding="utf-8")) for j in judgments} <= {"en", "und"}


def test_keyword_search_folds_case_in_every_cased_script_and_latin_diacritics(tmp_path, kb):
    """FTS5's unicode61 with remove_diacritics 2: case for Latin, Cyrillic, Greek; diacritics for
    Latin letters (Vietnamese, Polish, Turkish...). Greek tonos, Cyrillic ё and Arabic vowel marks
    stay as written (docs/benchmarks.md, "Languages")."""
    root = tmp_path / "v"
    write(root / "cafe.md", "# Café\n\nCrème brûlée in Kraków, Tōkyō and Đà Nẵng\n")
    write(root / "elka.md", "# Ёлка\n\nНовогодняя ЁЛКА и Αθήνα\n")
    kb.collections.create(root, name="v")
    kb.sync()
    for query, path in [("cafe creme brulee", "cafe.md"), ("KRAKOW", "cafe.md"), ("tokyo", "cafe.md"),
                        ("ёлка", "elka.md"), ("новогодняя", "elka.md"), ("ΑΘΉΝΑ", "elka.md")]:
        assert [h.path for h in kb.search(query, mode="keyword")][:1] == [path], query


# A multilingual model's stand-in (conftest.FakeServer): Spanish words mean their English
# ones, function words nothing. English notes; a Spanish query whose only words in common with
# them are "de" and "la" (`ls -la`, `de_DE`): the keyword list holds the wrong notes only.
MEANINGS = {"borrar": "delete", "archivos": "files", "repetidos": "duplicate", "carpeta": "folder",
            "los": "", "de": "", "la": "", "the": "", "and": "", "a": "", "in": "", "its": "", "with": ""}
SPANISH_QUERY = "Borrar los archivos repetidos de la carpeta"  # "delete the duplicate files in the folder"


@pytest.fixture
def english_tools(tmp_path):

    root = tmp_path / "tools"
    write(root / "fdupes.md", "# fdupes\n\nFind and delete the duplicate files in a folder and its subfolders.\n")
    write(root / "ls.md", "# ls\n\nList the contents of a directory with the hidden entries and the details: ls -la\n")
    write(root / "date.md", "# date\n\nShow the date and the time in the German way: LANG=de_DE date, and de_AT for Austria.\n")
    write(root / "tar.md", "# tar\n\nPack the files of a folder into an archive and unpack it again.\n")
    server = FakeServer()
    server.dim, server.words = 64, MEANINGS
    yield root, server
    server.stop()


@pytest.mark.parametrize("model", ["fake-multilingual-model", "fake-english-model"])
def test_a_query_in_another_language_than_the_notes_trusts_the_keyword_list_less(english_tools, db_path, model):
    root, server = english_tools
    with pms.KnowledgeBase(db_path, embedder=pms.HTTPEmbedder(server.url, model)) as kb:
        kb.collections.create(root, name="tools")
        assert kb.sync().embed_error is None and kb.status(pending=False)["languages"] == {"en": 4}
        keyword = [h.path for h in kb.search(SPANISH_QUERY, mode="keyword")]
        assert "fdupes.md" not in keyword and {"ls.md", "date.md"} <= set(keyword)  # what misleads
        with ranked(kb, embedder=pms.HTTPEmbedder(server.url, model), cross_language_keyword=1.0) as full_weight:
            before = full_weight.search(SPANISH_QUERY, k=4, mode="hybrid")
            assert before[0].path != "fdupes.md", "the keyword list's wrong notes win at full weight"
            result = kb.search(SPANISH_QUERY, k=4, mode="hybrid")
            if model == "fake-english-model":  # its vector list cannot read Spanish: the keyword list keeps its vote
                assert [h.path for h in result] == [h.path for h in before]
                assert "keyword x2 " in result.explain and "re-scored" in result.explain
            else:
                assert result[0].path == "fdupes.md" and "in another language" in result.explain
                # A multilingual model: both lists vote alike, no complete step (RankingSettings.multilingual_*).
                assert "keyword x1 " in result.explain and "re-scored" not in result.explain
            # A query in the notes' language, or one too short to tell, keeps the keyword list at full weight.
            for query in ("delete the duplicate files in the folder", "borrar archivos repetidos"):
                same = full_weight.search(query, k=4, mode="hybrid")
                shipped = kb.search(query, k=4, mode="hybrid")
                assert [h.path for h in shipped] == [h.path for h in same] and "another language" not in shipped.explain


# A mixed vault: each tool's page in Russian and in English. A Russian query's words reach the
# Russian pages only; the English page of the same tool is found by meaning alone, and the
# Russian pages that share a word or two with the query come first unless that is allowed for.
RUSSIAN = {"упаковать": "pack", "распаковать": "unpack", "файлы": "files", "папки": "folder", "архив": "archive",
           "снова": "again", "скопировать": "copy", "другую": "another", "папку": "folder", "удалить": "remove",
           "без": "without", "вопроса": "asking", "показать": "show", "подробностями": "details",
           "в": "", "и": "", "с": "", "the": "", "of": "", "a": "", "and": "", "into": "", "to": "", "with": ""}
MIXED_TOOLS = {"tar": ("Упаковать файлы папки в архив и распаковать архив снова.",
                       "Pack the files of a folder into an archive and unpack the archive again."),
               "cp": ("Скопировать файлы папки в другую папку.", "Copy the files of a folder to another folder."),
               "rm": ("Удалить файлы и папки без вопроса.", "Remove the files and the folders without asking."),
               "ls": ("Показать файлы папки с подробностями.", "Show the files of a folder with the details.")}


@pytest.mark.parametrize("model", ["fake-multilingual-model", "fake-english-model"])
def test_in_a_mixed_vault_a_note_in_another_language_is_ranked_by_meaning_alone(tmp_path, db_path, model):

    root = tmp_path / "mixed"
    for tool, (russian, english) in MIXED_TOOLS.items():
        write(root / "ru" / f"{tool}.md", f"# {tool}\n\n{russian}\n")
        write(root / "en" / f"{tool}.md", f"# {tool}\n\n{english}\n")
    server = FakeServer()
    server.dim, server.words = 64, RUSSIAN
    try:
        with pms.KnowledgeBase(db_path, embedder=pms.HTTPEmbedder(server.url, model)) as kb:
            kb.collections.create(root, name="tools")
            assert kb.sync().embed_error is None and kb.status(pending=False)["languages"] == {"en": 4, "ru": 4}
            with ranked(kb, embedder=pms.HTTPEmbedder(server.url, model), other_language_vote=0.0, other_language_feedback=0.0) as off:
                # The first query tells its language; the second is too short to, and the keyword list's notes tell it.
                for query in ("Упаковать файлы папки в архив", "архив файлы"):
                    before = [h.path for h in off.search(query, k=8, mode="hybrid")]
                    result = kb.search(query, k=8, mode="hybrid")
                    if model == "fake-english-model":  # its vector list cannot read Russian: the rule is off
                        assert [h.path for h in result] == before and "meaning alone" not in result.explain
                    else:
                        assert before[0] == "ru/tar.md" and before.index("en/tar.md") > 2, "words alone put the Russian pages first"
                        assert [h.path for h in result][:2] == ["ru/tar.md", "en/tar.md"], query
                        assert "another language than the query ranked by meaning alone" in result.explain
            # An English query in the same vault: its page first, the Russian one next to it.
            assert [h.path for h in kb.search("pack the files into an archive", k=8, mode="hybrid")][0] == "en/tar.md"
    finally:
        server.stop()


# -- issue 36, item 9: related notes within what the model can compare; advice from the first few notes --
TOPICS_DE = ["Der Sauerteig braucht zwölf Stunden, bevor das Brot in den heißen Ofen kommt.",
             "Die Steuererklärung muss bis Ende Juli beim Finanzamt sein, sonst gibt es eine Strafe.",
             "Im Herbst fahren wir mit dem Zug an die Ostsee und wandern an der Küste entlang.",
             "Der Verein trifft sich jeden Dienstag in der Turnhalle der alten Schule zum Training."]
TOPICS_RU = ["Рецепт борща: свёкла, капуста и много укропа, варить два часа на медленном огне.",
             "Отпуск в горах: палатка, спальник и карта перевала, который мы пройдём за три дня.",
             "Как настроить резервное копирование ноутбука на внешний диск каждую ночь автоматически."]
TOPICS_EN = ["Back up the laptop every night to the external drive with restic, and test a restore each month.",
             "The sourdough starter needs feeding twice a day before the bread goes into the oven.",
             "Our trip to the coast: trains, a tent and the map of the cliff path."]


def test_related_notes_with_an_english_model_stay_within_what_it_can_compare(tmp_path, hybrid_kb):
    root = tmp_path / "v"
    for name, texts in (("en", TOPICS_EN), ("de", TOPICS_DE), ("ru", TOPICS_RU)):
        for i, text in enumerate(texts):
            write(root / f"{name}{i}.md", f"# {name} {i}\n\n{text} {text}\n")
    hybrid_kb.collections.create(root, name="v")
    hybrid_kb.sync()
    assert hybrid_kb.status(pending=False)["languages"] == {"de": 4, "en": 3, "ru": 3}
    for hit in hybrid_kb.related("v/en0.md", k=10):  # an English note: English notes only, by meaning
        assert hit.path.startswith("en") and hit.vector_rank, (hit.path, hit.vector_rank)
    russian = hybrid_kb.related("v/ru2.md", k=10)  # English vectors of Russian text say nothing: by shared words
    assert all(h.vector_rank is None for h in russian), [(h.path, h.vector_rank) for h in russian]


def test_the_multilingual_advice_comes_with_the_first_few_notes_of_another_language():
    advice = pms.embedding.language_advice
    assert advice({"en": 1000, "ru": 3}, "sentence-transformers/all-MiniLM-L6-v2")  # a few Russian notes in a big wiki
    assert "3 of 1003 notes are not in English (Russian 3)" in advice({"en": 1000, "ru": 3}, "BAAI/bge-small-en-v1.5")
    assert advice({"en": 510, "de": 2, "fr": 1}, "BAAI/bge-small-en-v1.5") is None  # the Rust book: stray words
    assert advice({"en": 1000, "ru": 3}, "multilingual-e5-small") is None
