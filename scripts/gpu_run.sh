#!/usr/bin/env bash
# Everything this project needs a GPU for, in one command (see scripts/gpu_run.py):
#   bash scripts/gpu_run.sh --dry-run     # on any machine: check the set-up, list the steps
#   bash scripts/gpu_run.sh               # on a GPU machine; PYTHON picks the interpreter (python3)
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_run.py "$@"
