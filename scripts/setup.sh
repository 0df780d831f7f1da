#!/usr/bin/env bash
# Set up everything in .venv, then run the main job: build the book if it exists, else the library's self-check.
#   TORCH_SPEC   what to install when the venv has no torch (default torch==2.13.0, a CPU build;
#                an unpinned torch pulls several GB of CUDA packages)
#   PYTHON       the interpreter that creates the venv (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PY=.venv/bin/python
$PY -m pip install -q --upgrade pip
if ! $PY -c "import torch" 2>/dev/null; then
  # unquoted on purpose: TORCH_SPEC may carry pip options ("torch==2.13.0 --index-url URL")
  # shellcheck disable=SC2086
  $PY -m pip install -q ${TORCH_SPEC:-torch==2.13.0}
fi
$PY -m pip install -q -r requirements.txt
$PY -m pip install -q --no-deps -e .

# plotly.js 2, the version Colab's plotly 5.24 draws with: the browser test works every figure's
# controls in it as well as in the site's own plotly.js (tests/test_browser.py, PLOTLY2)
if [ ! -s .venv/plotly.js-2/plotly.min.js ]; then
  wheels=$(mktemp -d)
  if $PY -m pip download -q --no-deps plotly==5.24.1 -d "$wheels"; then
    mkdir -p .venv/plotly.js-2
    $PY -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); sys.stdout.buffer.write(z.read("plotly/package_data/plotly.min.js"))' \
      "$wheels"/plotly-5.24.1-py3-none-any.whl > .venv/plotly.js-2/plotly.min.js
  else
    echo "setup: could not download plotly 5.24.1 (for plotly.js 2); the browser test will say so" >&2
  fi
  rm -rf "$wheels"
fi

# ONNX Runtime Web, which runs the chapters' trained models in the reader's browser (the live
# panels, book/_ext/live_models.py): from the npm registry, checked, without node
if ! $PY scripts/install_onnxruntime_web.py; then
  echo "setup: could not install onnxruntime-web; the book build will say so" >&2
fi

source scripts/offline-data.sh
if [ -f _config.yml ]; then
  # the chapters run on one thread each: execute them a core each into the build's cache first
  $PY scripts/execute_book.py
  .venv/bin/jupyter-book build . -W --keep-going
else
  $PY -m transformer_lib
fi
