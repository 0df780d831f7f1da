#!/usr/bin/env bash
# Before scripts/gpu_run.sh, on a machine where pip reaches the package registry: put what an
# air-gapped GPU machine lacks inside the repository, in the git-ignored folder .gpu/:
#   .gpu/wheels  pure-Python wheels of the packages the chapters need beyond torch (the versions in
#                .venv when it exists, so the GPU runs what CI runs; else the newest)
#   .gpu/data    the offline data (Tiny Shakespeare, tiktoken's GPT-2 files) from TFS_DATA_DIR or ../shared/data
# gpu_run.sh installs only the wheels whose modules the GPU machine's python lacks. About 20 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
PACKAGES="plotly narwhals ipywidgets comm widgetsnbextension jupyterlab_widgets ipython ipython_pygments_lexers
  traitlets jedi parso prompt_toolkit wcwidth pexpect ptyprocess stack_data asttokens executing pure_eval
  decorator matplotlib_inline pygments einops tqdm"
specs=()
for name in $PACKAGES; do
  v=$($PY -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name" 2>/dev/null || true)
  specs+=("$name${v:+==$v}")
done
rm -rf .gpu/wheels && mkdir -p .gpu/wheels
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py \
  --abi none --platform any -d .gpu/wheels "${specs[@]}"
data=${TFS_DATA_DIR:-../shared/data}
for f in tinyshakespeare.txt tiktoken-cache; do
  [ -e "$data/$f" ] || { echo "gpu_prepare: $data/$f is missing (set TFS_DATA_DIR)" >&2; exit 1; }
done
rm -rf .gpu/data && mkdir -p .gpu/data && cp -r "$data/tinyshakespeare.txt" "$data/tiktoken-cache" .gpu/data/
echo "gpu_prepare: $(ls .gpu/wheels | wc -l) wheels and the data in .gpu ($(du -sh .gpu | cut -f1))"
