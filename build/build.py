#!/usr/bin/env python3
"""Build the packaged PMS app for the OS this runs on (PyInstaller, one folder).

    python3 build/build.py            # build into build/out/pms (+ PMS.app on macOS) and an archive
    python3 build/build.py --smoke    # build, then run build/smoke_test.py on the result
    python3 build/build.py --smoke-only   # smoke-test the existing build

Steps: put the embedding model in build/work/assets/model, render the icon
from gui/icon.svg, run PyInstaller on build/pms.spec, archive the folder
(tar.gz on Linux, zip on Windows and macOS) and print its sizes.

The model: by default BAAI/bge-small-en-v1.5 from fastembed's cache (fastembed
downloads it when it is missing, so that needs the internet once). PMS_MODEL
names another fastembed model; PMS_MODEL_DIR takes a local model folder
instead, such as the offline MiniLM copy from scripts/fetch_test_model.py.

Runs under the project's .venv when the current Python lacks PyInstaller
(install it with: pip install -r build/requirements.txt).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

BUILD = Path(__file__).resolve().parent
ROOT = BUILD.parent
OUT = BUILD / "out"
WORK = BUILD / "work"
ASSETS = WORK / "assets"
# Model repository files the app never reads.
MODEL_SKIP = {".gitattributes", "README.md", ".gitignore"}
ICON_SOURCE = ROOT / "gui" / "icon.svg"  # the desktop app's own icon, so window and app match


def venv_python() -> Path | None:
    """The project's .venv Python, unless it is the one running."""
    venv = ROOT / ".venv"
    if Path(sys.prefix).resolve() == venv.resolve():
        return None
    for candidate in (venv / "bin" / "python", venv / "Scripts" / "python.exe"):
        if candidate.exists():
            return candidate
    return None


def ensure_pyinstaller() -> None:
    """Re-run this script under .venv/bin/python when this Python has no PyInstaller."""
    try:
        import PyInstaller  # noqa: F401
        return
    except ImportError:
        pass
    python = venv_python()
    if python:
        os.execv(str(python), [str(python), __file__, *sys.argv[1:]])
    sys.exit(f"build: PyInstaller is not installed for {sys.executable} (run: {sys.executable} -m pip install -r build/requirements.txt)")


def engine():
    sys.path.insert(0, str(ROOT))
    import pms

    return pms


# Model #######################################################################

def copy_model_folder(source: Path, target: Path, name: str) -> None:
    """Copy a model folder (following the Hub cache's symlinks) and name its model in pms-model.txt."""
    if target.exists():
        shutil.rmtree(target)
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_dir() or path.name in MODEL_SKIP or relative.parts[0].startswith("."):
            continue
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path.resolve(), target / relative)
    (target / "pms-model.txt").write_text(name + "\n")


def fastembed_model_folder(pms, name: str) -> Path:
    """The folder of `name` in fastembed's cache; fastembed downloads it when missing."""
    try:
        from fastembed import TextEmbedding
    except ImportError:
        sys.exit("build: fastembed is not installed (pip install -r requirements-dev.txt), or set PMS_MODEL_DIR")
    try:
        with pms.quiet_logs():  # a cache miss is expected: no need for fastembed's ERROR lines
            model = TextEmbedding(name, lazy_load=True, local_files_only=True)
    except Exception:
        print(f"build: {name} is not in fastembed's cache; downloading it")
        try:
            model = TextEmbedding(name, lazy_load=True)
        except Exception as exc:
            sys.exit(f"build: cannot download {name} ({str(exc).splitlines()[0][:160]}); "
                     f"offline, set PMS_MODEL_DIR to a model folder (python3 scripts/fetch_test_model.py)")
    return Path(model.model._model_dir)


def prepare_model(pms, target: Path = ASSETS / "model") -> str:
    """Fill the bundled model folder (build/work/assets/model); return the model's name."""
    folder = os.environ.get("PMS_MODEL_DIR")
    if folder:
        source = Path(folder).expanduser()
        if not any(source.glob("**/*.onnx")):
            sys.exit(f"build: PMS_MODEL_DIR={source} holds no .onnx model (make one: python3 scripts/fetch_test_model.py)")
        marker = source / "pms-model.txt"
        name = os.environ.get("PMS_MODEL") or (marker.read_text().strip() if marker.exists() else pms.DEFAULT_MODEL)
    else:
        name = os.environ.get("PMS_MODEL") or pms.DEFAULT_MODEL
        source = fastembed_model_folder(pms, name)
    copy_model_folder(source, target, name)
    size = folder_bytes(target)
    print(f"build: model {name} from {source} ({size / 1e6:.0f} MB)")
    return name


# Icon ########################################################################

def render_icons(icons: Path = ASSETS / "icons") -> None:
    """gui/icon.svg -> pms.png (Qt's SVG renderer), pms.ico and pms.icns (Pillow)."""
    if not ICON_SOURCE.exists():
        print(f"build: {ICON_SOURCE} not found; building without an icon")
        return
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PIL import Image
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    shutil.rmtree(icons, ignore_errors=True)
    icons.mkdir(parents=True)
    app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841  (QPainter needs one)
    image = QImage(1024, 1024, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(ICON_SOURCE)).render(painter)
    painter.end()
    big = icons / "pms-1024.png"
    image.save(str(big))
    with Image.open(big) as picture:
        picture.resize((256, 256), Image.LANCZOS).save(icons / "pms.png")
        picture.save(icons / "pms.ico", sizes=[(s, s) for s in (16, 24, 32, 48, 64, 128, 256)])
        picture.save(icons / "pms.icns")


# Build and measure #############################################################

def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def app_folder() -> Path:
    """The built folder: PMS.app on macOS (when the GUI is built), else build/out/pms."""
    bundle = OUT / "PMS.app"
    return bundle if sys.platform == "darwin" and bundle.exists() else OUT / "pms"


def archive(folder: Path, version: str) -> Path:
    system = {"win32": "windows", "darwin": "macos"}.get(sys.platform, "linux")
    base = OUT / f"pms-{version}-{system}-{platform.machine().lower()}"
    for old in [*OUT.glob("pms-*.tar.gz"), *OUT.glob("pms-*.zip")]:  # earlier builds' archives
        old.unlink()
    if sys.platform == "darwin":  # ditto keeps the bundle's symlinks and signatures
        target = Path(f"{base}.zip")
        subprocess.run(["ditto", "-c", "-k", "--keepParent", str(folder), str(target)], check=True)
        return target
    if sys.platform == "win32":
        return Path(shutil.make_archive(str(base), "zip", folder.parent, folder.name))
    target = Path(f"{base}.tar.gz")
    with tarfile.open(target, "w:gz", compresslevel=9) as tar:
        tar.add(folder, arcname=folder.name)
    return target


def run_pyinstaller() -> None:
    command = [sys.executable, "-m", "PyInstaller", str(BUILD / "pms.spec"), "--noconfirm", "--clean",
               "--log-level", "WARN", "--distpath", str(OUT), "--workpath", str(WORK / "pyinstaller")]
    print("build:", " ".join(command))
    subprocess.run(command, check=True, cwd=ROOT)


def build() -> dict:
    pms = engine()
    started = time.monotonic()
    model = prepare_model(pms)
    render_icons()
    if not (ROOT / "gui" / "app.py").exists():
        print("build: gui/app.py not found; building the pms command line only")
    run_pyinstaller()
    folder = app_folder()
    built = time.monotonic()
    packed = archive(folder, pms.VERSION)
    report = {
        "version": pms.VERSION,
        "platform": f"{sys.platform}-{platform.machine().lower()}",
        "model": model,
        "gui": (ROOT / "gui" / "app.py").exists(),
        "folder": str(folder),
        "archive": str(packed),
        "build_seconds": round(built - started, 1),
        "archive_seconds": round(time.monotonic() - built, 1),
        "unpacked_mb": round(folder_bytes(folder) / 1e6, 1),
        "archive_mb": round(packed.stat().st_size / 1e6, 1),
    }
    (OUT / "build-report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"build: {folder} ({report['unpacked_mb']} MB unpacked) in {report['build_seconds']} s; "
          f"archive {packed.name} ({report['archive_mb']} MB)")
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="run build/smoke_test.py after the build")
    parser.add_argument("--smoke-only", action="store_true", help="only smoke-test the existing build")
    args = parser.parse_args(argv)
    if not args.smoke_only:
        ensure_pyinstaller()
        build()
    if args.smoke or args.smoke_only:
        return subprocess.run([sys.executable, str(BUILD / "smoke_test.py"), str(app_folder())]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
