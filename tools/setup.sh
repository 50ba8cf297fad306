#!/usr/bin/env bash
# One-time machine set-up shared by `make demo`, `make test` and `make bench`.
# Idempotent: each step is skipped when what it installs is already there.
set -euo pipefail
APT_PACKAGES="llvm-19-dev librocksdb-dev libxxhash-dev libgtest-dev libbenchmark-dev ninja-build cmake g++ clang-format-19"
missing=""
for p in $APT_PACKAGES; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
PY=${PYTHON:-python3}
# The checks below import torch; an installed kiln whose build is absent or
# stale must not make them fail (and reinstall torch): no backend autoload.
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
# torch is pinned and installed on its own, never as a dependency of kiln, so
# pip can never resolve (and download) another torch build.
if ! $PY -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  echo "setup: installing torch==2.13.0"
  $PY -m pip install -q torch==2.13.0
fi
# ruff (`make lint`): pinned, since each release can format differently; it has
# no dependencies, and --no-deps keeps it that way.
RUFF_VERSION=0.17.6
if [ "$($PY -m ruff --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]; then
  echo "setup: installing ruff==$RUFF_VERSION"
  $PY -m pip install -q --no-deps "ruff==$RUFF_VERSION"
fi
for mod in pytest:pytest expecttest:expecttest numpy:numpy; do
  m=${mod%%:*}; pkg=${mod##*:}
  $PY -c "import $m" 2>/dev/null || $PY -m pip install -q "$pkg"
done
# Hugging Face Transformers and Accelerate for the real-model tests: pinned with what it
# imports, and --no-deps, so nothing it lists can pull another torch.
REQS="$(dirname "$0")/../tests/requirements.txt"
if ! $PY -c 'import transformers, accelerate, sys; sys.exit(0 if (transformers.__version__, accelerate.__version__) == ("4.57.6", "1.10.1") else 1)' 2>/dev/null; then
  echo "setup: installing the test dependencies (tests/requirements.txt)"
  $PY -m pip install -q --no-deps -r "$REQS"
fi
