# Sourced at the start of every device-machine run: installs the carried wheels (.whl) into
# /tmp/site and puts them and the repository on the path. Not used by CI (no GPU there).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} LD_LIBRARY_PATH=/tmp/site/nvidia/nvjpeg/lib:${LD_LIBRARY_PATH:-}
export KERAS_BACKEND=torch PYTHONUNBUFFERED=1
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"  # logs that come back
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import cupy, torch, numpy; print('cupy', cupy.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
# drop the codec extensions' load warnings (nvjpeg2k / nvtiff are not carried) from a log
quiet() { grep -v -E "nvjpeg2k|nvTIFF|nvtiff|NVTIFF|nvJPEG2000|Failed to load|ERROR.*ext|Note: If"; }
# the benchmark data set (1,024 COCO-like JPEGs) in $1, made once
bench_data() { python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_gpu; bench_gpu.make_dataset('$1', 1024, 16)" >/dev/null 2>&1; }
