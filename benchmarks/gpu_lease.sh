#!/usr/bin/env bash
# One lent GPU machine, one call: install daydream there (building the CUPTI
# extension against that machine's toolkit), run benchmarks/gpu_session.py
# within a time budget, and pack what it wrote into a few files under $OUT
# (the device tool brings back at most 8 files).
#
#   bash benchmarks/gpu_lease.sh [BUDGET_S [gpu_session.py options...]]   # on the device, repo root
#
# The extensions are built in place with 16 jobs (~15 s; `pip install -e .`
# builds them one by one, ~45 s) and the tree is used through PYTHONPATH.
set -u
BUDGET_S=${1:-430}
shift || true
W=/tmp/gpu_session
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())"
  command -v nvcc; ls -d /usr/local/cuda*; ls /usr/local/cuda/extras/CUPTI/include/cupti.h /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* 2>&1
  python3 -m pip list 2>/dev/null | grep -i -E "^(torch|numpy|networkx|matplotlib|click|pybind11|setuptools|hypothesis|orjson) "
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
t0=$(date +%s)
python3 setup.py build_ext --inplace -j 16 > "$W/install.log" 2>&1
ln -sfn ../optimizations daydream/optimizations   # what the install's package-dir mapping does
export PYTHONPATH=$PWD
echo "install: $(( $(date +%s) - t0 )) s"; grep -E "^daydream:|rror" "$W/install.log" | head -20; ls daydream/*.so
timeout $(( BUDGET_S + 40 )) python3 benchmarks/gpu_session.py "$W" --budget-s "$BUDGET_S" "$@"
echo "gpu_session rc=$?"
cp "$W/install.log" "$W/install.txt" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$W" --exclude='*.json.gz' .
(cd "$W" && tar czf "$OUT/traces.tgz" $(ls mlp.*.json.gz cnn.*.json.gz transformer.*.json.gz 2>/dev/null | grep -v -E "base|variant"))
(cd "$W" && tar czf "$OUT/overhead.tgz" overhead 2>/dev/null)
(cd "$W" && tar czf "$OUT/whatif.tgz" $(ls *.base*.json.gz *.variant*.json.gz 2>/dev/null))
ls -la "$OUT"
