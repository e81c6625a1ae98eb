#!/usr/bin/env bash
# Regenerates every tests/goldens/*.bin with Debian's python3-torch (PyTorch 1.13).
# The files are committed; tests never need torch at run time.
set -euo pipefail
cd "$(dirname "$0")/goldens"
PY=/usr/bin/python3
$PY -c "import torch" 2>/dev/null || { echo "needs Debian's python3-torch: apt-get install -y python3-torch" >&2; exit 1; }
for f in gen_*.py; do OMP_NUM_THREADS=1 $PY "$f"; done
