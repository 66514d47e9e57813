#!/usr/bin/env bash
# ember-cupy on a GPU machine, in one go and under 10 minutes: the plugin's GPU tests, the
# conformance suite on `cupy`, the MLP / ResNet-18 training benchmarks against PyTorch CUDA, and
# the official ONNX model sets and node cases on `cupy`.
#
#   bash plugins/cupy/gpu_check.sh [OUT_DIR]        (default: $OUT, else a new temporary folder)
#
# Made for the project's GPU machine: one H200, no network, with cupy-cuda13x, numpy, torch,
# pytest and pluggy preinstalled. It installs nothing from the network: ember and this plugin
# go in editable from the repository copy (--no-deps --no-build-isolation); hypothesis, which
# the conformance suite needs, is taken from a wheel folder ($EMBER_WHEELS, default ./.wheels)
# if it is not installed. Every step has its own time limit, writes its log into OUT_DIR, and
# the run goes on after a failed step; OUT_DIR/summary.md says what passed and how long it took.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-${OUT:-$(mktemp -d)}}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
echo "results go to $OUT"
cd "$ROOT"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
PY="${PYTHON:-python3}"
START=$(date +%s)
SUMMARY="$OUT/summary.md"
printf '# ember-cupy GPU check\n\n| step | status | seconds |\n| --- | --- | ---: |\n' > "$SUMMARY"

# step NAME LIMIT_SECONDS COMMAND...: run with a time limit, log to OUT/NAME.log, record the outcome
step() {
  local name="$1" limit="$2"; shift 2
  local t0=$(date +%s) rc
  echo "=== $name (limit ${limit}s, $(($(date +%s) - START))s elapsed)"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  local status="ok"
  [ $rc -eq 124 ] && status="TIMED OUT after ${limit}s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && status="FAILED (exit $rc)"
  printf '| %s | %s | %d |\n' "$name" "$status" "$(($(date +%s) - t0))" >> "$SUMMARY"
  tail -n 5 "$OUT/$name.log"
  return $rc
}

step environment 20 bash -c "nvidia-smi; $PY -c 'import sys, numpy, cupy, torch; print(sys.version); \
print(\"numpy\", numpy.__version__, \"cupy\", cupy.__version__, \"torch\", torch.__version__, \
\"torch cuda\", torch.version.cuda, torch.cuda.is_available()); cupy.show_config()'; \
$PY -c 'import onnx, ml_dtypes; print(\"onnx\", onnx.__version__, \"ml_dtypes\", ml_dtypes.__version__)' || true"

step install 45 bash -c "$PY -m pip install --no-deps --no-build-isolation -e . -e plugins/cupy && \
( $PY -c 'import hypothesis' 2>/dev/null || $PY -m pip install --no-index \
  --find-links \"\${EMBER_WHEELS:-$ROOT/.wheels}\" hypothesis attrs sortedcontainers )"

# The official int4/int2 cast cases take their expected values from ml_dtypes, whose rule changed
# in 0.7 (docs/onnx.md): a wheel of 0.7 or later in the wheel folder replaces an older one.
$PY -c 'import ml_dtypes as m, sys; sys.exit(tuple(map(int, m.__version__.split(".")[:2])) < (0, 7))' 2>/dev/null ||
  $PY -m pip install -q --no-index --no-deps --find-links "${EMBER_WHEELS:-$ROOT/.wheels}" "ml_dtypes>=0.7" \
    >> "$OUT/install.log" 2>&1 || echo "ml_dtypes older than 0.7 and no wheel of it: 24 ONNX cast cases will differ" \
    | tee -a "$OUT/install.log"

step backends 20 $PY -m ember.cli backends
if ! $PY -c "from ember_cupy import device; ok, why = device.probe(); print(why); raise SystemExit(0 if ok else 1)" \
    >> "$OUT/backends.log" 2>&1; then
  echo "cupy is unavailable here (see $OUT/backends.log); nothing else to check" | tee -a "$SUMMARY"
  exit 2
fi

# The plugin's GPU tests (the host-harness ones ran on the CPU machines already).
step pytest 100 $PY -m pytest tests/plugins/cupy/test_cupy_gpu.py tests/plugins/cupy/test_cupy_plugin.py \
  -q -rs -p no:cacheprovider -m "not slow" \
  --junitxml="$OUT/pytest.xml"

# CuPy compiles a kernel for each new combination of operation, dtypes and rank, about a second
# each on a fresh machine: the suite took over 8 minutes that way on the first GPU run (2026-12-04),
# against 20 s on the host harness. So the suite runs once first on many processes (pytest-xdist,
# where installed) only to fill CuPy's kernel cache on disk; its result is not the certificate.
if $PY -c 'import xdist' 2>/dev/null; then
  WORKERS=$(( $(nproc) > 4 ? $(nproc) - 2 : 2 ))
  WARM="$(mktemp -d)" && printf '[pytest]\n' > "$WARM/pytest.ini"  # as certify: no project configuration
  step conformance-warm-up 120 env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $PY -m pytest -c "$WARM/pytest.ini" \
    --rootdir "$WARM" -p xdist -p ember.conformance.plugin -p no:cacheprovider --pyargs ember.conformance \
    --ember-backend cupy --ember-max-examples 5 -q --tb=no -n "$WORKERS"
fi

# The conformance suite on the real backend (a failing tier fails the step; the certificate says which).
# Its progress goes to the log: if the limit cuts it off before the certificate, the log's count
# of dots and Fs still says which tests ran and failed (in the order of --collect-only).
step conformance 150 $PY -m ember.cli certify cupy --require-available --max-examples 5 \
  --out "$OUT/certificate"

# Training throughput against PyTorch CUDA: MLP first (cheap), ResNet-18 after.
step bench 160 $PY -m benchmarks.cupy_gpu --out "$OUT/bench" --workloads mlp,resnet18 \
  --targets torch-cuda,ember-cupy,ember-cupy-multi,ember-cupy-jit --steps 20 --warmup 3 --timeout 45

# The official ONNX cases on the device (docs/onnx.md): the model sets, then the node cases in two
# halves, so that a half cut short by its limit leaves the other's table.
step onnx-models 60 $PY -m ember.cli onnx test --backend cupy --set models --out "$OUT/onnx-models.json"
step onnx-node-a-l 90 $PY -m ember.cli onnx test --backend cupy --set node --cases '^test_[a-l]' \
  --out "$OUT/onnx-node-a-l.json"
step onnx-node-m-z 90 $PY -m ember.cli onnx test --backend cupy --set node --cases '^test_[^a-l]' \
  --out "$OUT/onnx-node-m-z.json"

{
  printf '\ntotal: %ds\n\n' "$(($(date +%s) - START))"
  [ -f "$OUT/certificate/certificate.md" ] && head -n 20 "$OUT/certificate/certificate.md"
  printf '\n## Benchmarks (batch 128, float32, SGD momentum 0.9)\n\n'
  cat "$OUT/bench/bench.md" 2>/dev/null || echo "(no benchmark table)"
} >> "$SUMMARY"
cat "$SUMMARY"
