#!/usr/bin/env bash
# Builds the example archive: random weights for model.py's SmallNet, then
# torch-model-archiver with the handler and model-config.yaml.
#   deploy/torchserve/make_archive.sh [MODEL_STORE]   (default: ./model_store)
# Needs the venv's python and torch-model-archiver on PATH (make setup).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
store="${1:-model_store}"
mkdir -p "$store"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python - "$here" "$work/weights.pt" <<'PY'
import sys
import torch
sys.path.insert(0, sys.argv[1])
from model import SmallNet
torch.manual_seed(0)
torch.save(SmallNet().eval().state_dict(), sys.argv[2])
PY
torch-model-archiver --model-name smallnet --version 1.0 --force \
  --model-file "$here/model.py" --serialized-file "$work/weights.pt" \
  --handler "$here/handler.py" --config-file "$here/model-config.yaml" \
  --export-path "$store"
echo "wrote $store/smallnet.mar"
