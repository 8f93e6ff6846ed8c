#!/usr/bin/env bash
# mamba-ssm's sources for the Triton-interpreter lane, unpacked under .cache/ (not installed:
# its package __init__ imports CUDA extensions; tests/triton_interp/harness.py imports the
# Triton ops from the sources). Run inside the dev venv (its torch answers the sdist's setup.py).
set -euo pipefail
VERSION=2.3.2.post1
SHA256=104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028
DEST="$(cd "$(dirname "$0")/../.." && pwd)/.cache/mamba-ssm"
[ -f "$DEST/mamba_ssm-$VERSION/mamba_ssm/ops/triton/ssd_combined.py" ] && exit 0
mkdir -p "$DEST"
MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE pip download -q "mamba-ssm==$VERSION" --no-deps \
  --no-binary :all: --no-build-isolation -d "$DEST"
echo "$SHA256  $DEST/mamba_ssm-$VERSION.tar.gz" | sha256sum -c --quiet
tar xzf "$DEST/mamba_ssm-$VERSION.tar.gz" -C "$DEST"
