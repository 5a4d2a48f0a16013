set -euo pipefail
echo 'pip install -e . && detaug demo --out demo.png        # add ".[gpu]" for cupy + nvImageCodec'
SECONDS=0
pip install -e . && detaug demo --out demo.png        # add ".[gpu]" for cupy + nvImageCodec
echo "  ($SECONDS s)"
echo 'pip install torch==2.13.0 && pip install -e ".[test,tf]" && KERAS_BACKEND=torch python -m pytest -q -n auto'
SECONDS=0
pip install torch==2.13.0 && pip install -e ".[test,tf]" && KERAS_BACKEND=torch python -m pytest -q -n auto
echo "  ($SECONDS s)"
