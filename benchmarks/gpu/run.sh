#!/usr/bin/env bash
# On a machine with a GPU (NVIDIA; AMD through ROCm where the libraries build): install the GPU extras,
# run the conformance kit on every GPU backend, and time dispatch through mixboard against calling
# flash-attn, mamba-ssm, causal-conv1d and mixboard-triton's kernels directly (target: <= 5 % overhead).
# Writes benchmarks/gpu/results/{kit.md,dispatch.md,*.log} (or under $OUT when set). About 10 minutes
# when the GPU libraries install from prebuilt wheels; a library that would have to compile is given
# up after LIB_TIMEOUT seconds and its backend's rows say it is not installed.
#
#   bash benchmarks/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
RESULTS=${OUT:-benchmarks/gpu/results}
LIB_TIMEOUT=${LIB_TIMEOUT:-150}
mkdir -p "$RESULTS"
log() { echo "[gpu $(date +%T)] $*" | tee -a "$RESULTS/run.log"; }

# 1. A venv that sees the machine's CUDA torch (and its triton), with mixboard and every plugin.
[ -x .venv-gpu/bin/python ] || python3 -m venv --system-site-packages .venv-gpu
. .venv-gpu/bin/activate
if ! python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  log "no GPU-enabled torch here: installing torch from PyPI (its Linux wheels are CUDA builds)"
  pip install -q torch || { log "torch did not install"; exit 1; }
  python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" || { log "torch sees no GPU"; exit 1; }
fi
pip install -q packaging ninja wheel einops setuptools >>"$RESULTS/install.log" 2>&1
pip install -q -e . -e ./plugins/attention_sdpa -e ./plugins/attention_flash -e ./plugins/mamba1 \
  -e ./plugins/mamba2 -e ./plugins/shortconv -e './plugins/triton[gpu]' -e './plugins/gdn[fla]' \
  >>"$RESULTS/install.log" 2>&1 \
  || { log "mixboard's plugins did not install (see install.log)"; exit 1; }
# The plugins' GPU extras. Their setup.py fetches a prebuilt wheel matching this torch, CUDA and Python
# from the project's releases, else compiles (tens of minutes): bounded, and skipped where importable.
for lib in "causal_conv1d causal-conv1d>=1.5" "mamba_ssm mamba-ssm>=2.3" "flash_attn flash-attn>=2.6"; do
  set -- $lib
  python -c "import $1" 2>/dev/null && { log "$1 already installed"; continue; }
  log "installing $2"
  MAX_JOBS=${MAX_JOBS:-8} timeout "$LIB_TIMEOUT" pip install -q --no-build-isolation "$2" >>"$RESULTS/install.log" 2>&1 \
    || log "$2 did not install within ${LIB_TIMEOUT}s (see install.log): its backend is reported as unavailable"
done
mixboard backends >"$RESULTS/backends.txt"  # what this machine serves, and why not where not

# 2. The conformance kit, quick mode, every dtype each backend declares, on the GPU.
echo "| backend | kit (quick mode, cuda) |" >"$RESULTS/kit.md"; echo "| --- | --- |" >>"$RESULTS/kit.md"
for b in flash_attn mamba1_cuda mamba2_triton short_conv_cuda triton_attn short_conv_triton mamba1_triton \
         moe_triton gdn_fla; do
  log "mixboard check $b"
  timeout 240 mixboard check "$b" --device cuda >"$RESULTS/check_$b.log" 2>&1
  rc=$?
  echo "| $b | rc $rc: $(tail -n 1 "$RESULTS/check_$b.log") |" >>"$RESULTS/kit.md"
done

# 3. Dispatch through mixboard against the libraries called directly.
log "timing dispatch"
timeout 240 python benchmarks/gpu/bench_dispatch.py --out "$RESULTS/dispatch.md" >"$RESULTS/dispatch.log" 2>&1 \
  || log "bench_dispatch.py failed (see dispatch.log)"
cat "$RESULTS/kit.md" "$RESULTS/dispatch.md" 2>/dev/null
log "done: $RESULTS"
