#!/usr/bin/env bash
# The Triton-interpreter lane: Triton kernels on CPU tensors (TRITON_INTERPRET=1), through the
# conformance kit: mamba-ssm's own (mamba2_triton), fla-core's (gdn_fla: Gated DeltaNet's chunked
# and recurrent kernels) and mixboard-triton's (triton_attn, short_conv_triton, mamba1_triton, moe_triton).
# MIXBOARD_THOROUGH=1 adds the kit's long cases (far slower).
# Its own venv (.venv-triton, git-ignored) layered on the dev venv (.venv, read through a .pth):
# triton lives only here, because transformers imports triton wherever it is installed, and the
# main suite's doubles of mamba_ssm/triton then skip.
# mamba-ssm is not installed: its sources are fetched and imported by tests/triton_interp/harness.py.
# fla-core is (pure Python, needs only einops); its shims are tests/triton_interp/fla_harness.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x .venv-triton/bin/python ]; then
  python3 -m venv .venv-triton
  purelib="import sysconfig; print(sysconfig.get_paths()['purelib'])"
  dev=$(.venv/bin/python -c "$purelib")
  echo "import site; site.addsitedir('$dev')" > "$(.venv-triton/bin/python -c "$purelib")/zz_dev_venv.pth"
  .venv-triton/bin/pip install -q "triton==3.9.*" "einops==0.8.*"
fi
.venv-triton/bin/python -c "import fla" 2>/dev/null || .venv-triton/bin/pip install -q "fla-core==0.6.0"
PATH="$PWD/.venv/bin:$PATH" bash tests/triton_interp/fetch_mamba_ssm.sh  # the dev venv: torch and wheel for the sdist's setup.py
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# 1. mamba2_triton on mamba-ssm's own Triton kernels: the kit in a child process, behind harness.py's shims.
.venv-triton/bin/python -m pytest -p no:cacheprovider -s tests/triton_interp/lane_mamba2_triton.py "$@"
# 2. gdn_fla on fla-core's own Triton kernels: the kit in a child process, behind fla_harness.py's shims.
.venv-triton/bin/python -m pytest -p no:cacheprovider -s tests/triton_interp/lane_gdn_fla.py "$@"
# 3. mixboard-triton's own kernels: the kit's cases as pytest items, one per case, and the selection rule.
TRITON_INTERPRET=1 .venv-triton/bin/python -m pytest -p no:cacheprovider -o addopts= -v --durations=5 \
  tests/triton_interp/lane_triton_plugin.py --mixboard-backend triton_attn,short_conv_triton,mamba1_triton,moe_triton \
  --mixboard-device cpu --mixboard-dtype float32 "$@"
