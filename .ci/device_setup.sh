# Sourced at the start of every device-machine run: installs the carried wheels (.whl) into
# /tmp/site and puts them and the repository on the path. Not used by CI (no GPU there).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} LD_LIBRARY_PATH=/tmp/site/nvidia/nvjpeg/lib:${LD_LIBRARY_PATH:-}
export KERAS_BACKEND=torch PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import cupy, torch, numpy; print('cupy', cupy.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
