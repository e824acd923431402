#!/usr/bin/env bash
# Fill a git-ignored folder with the wheels bench/gpu_check.sh needs on a bare GPU machine with no network:
# autotune's dependencies that such a machine lacks, for CPython 3.12 on manylinux x86_64 (the H200 machines'
# python3). Run it where the package registries are; carry the folder along (device tool: carry [".whl"]).
#
#   bash bench/gpu_wheels.sh [--python-version 3.12] [--dest .whl]
#
# That machine already has torch (CUDA), torchvision, numpy, scipy, scikit-learn, pandas, pyyaml, rich, pillow,
# tqdm, packaging, markupsafe, narwhals, typing-extensions (the list below, from the device docs' KINDS.md). It
# lacks optuna, alembic, sqlalchemy, colorlog, mako, pydantic, pydantic-core, annotated-types, typing-inspection,
# cmaes and plotly; typing-extensions and narwhals travel too, because pydantic needs typing-extensions >= 4.16
# and plotly narwhals >= 1.15.1, newer than that machine may hold. Not needed by the check, so not carried:
# optuna-dashboard (the live dashboard), psycopg (PostgreSQL), greenlet (SQLAlchemy 2.1 needs it only for asyncio).
# The pins are the versions autotune's tests pass with. After downloading, every wheel's requirements are checked
# against the folder and that machine's packages, so a missing one fails here, not there.
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=3.12
DEST=.whl
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PYVER="$2"; shift 2 ;;
    --dest) DEST="$2"; shift 2 ;;
    *) echo "usage: bash bench/gpu_wheels.sh [--python-version 3.12] [--dest .whl]" >&2; exit 2 ;;
  esac
done
PINS=(
  optuna==5.1.0 alembic==1.20.1 SQLAlchemy==2.1.9 colorlog==6.12.0 Mako==1.4.3
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
  cmaes==0.13.1 plotly==7.1.0 narwhals==2.29.0
)
# The GPU machine's Python packages (KINDS.md, "Python packages already there", read 2026-11-17).
THERE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"

mkdir -p "$DEST"
rm -f "$DEST"/*.whl  # one version of each: two stop the whole install there
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" "${PINS[@]}"

THERE="$THERE" python3 - "$DEST" "$PYVER" <<'PY'
"""Every requirement of every wheel (extras left out, markers for the target) is in the folder or on the machine."""
import os
import re
import sys
import zipfile
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # pip vendors it
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

dest, pyver = Path(sys.argv[1]), sys.argv[2]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
there = {norm(n) for n in os.environ["THERE"].split()}
env = {"python_version": pyver, "python_full_version": pyver + ".0", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
wheels = {}
for w in sorted(dest.glob("*.whl")):
    with zipfile.ZipFile(w) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    name = norm(re.search(r"^Name: (.+)$", meta, re.M).group(1).strip())
    version = re.search(r"^Version: (.+)$", meta, re.M).group(1).strip()
    wheels[name] = (Version(version), [l[len("Requires-Dist: "):] for l in meta.splitlines()
                                       if l.startswith("Requires-Dist: ")], w)
problems, total = [], 0
for name, (version, reqs, w) in sorted(wheels.items()):
    total += w.stat().st_size
    for text in reqs:
        r = Requirement(text)
        if r.marker is not None and not r.marker.evaluate(env):
            continue  # an extra, or another platform or Python
        dep = norm(r.name)
        if dep in wheels:
            if r.specifier and not r.specifier.contains(wheels[dep][0], prereleases=True):
                problems.append(f"{name} needs {text}; the folder has {dep} {wheels[dep][0]}")
        elif dep not in there:
            problems.append(f"{name} needs {text}: neither in {dest} nor on the GPU machine")
    print(f"  {w.name:<72} {w.stat().st_size / 2**20:6.2f} MiB")
print(f"{len(wheels)} wheels for CPython {pyver}, {total / 2**20:.1f} MiB in {dest}")
if problems:
    print("missing:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print("every requirement is in the folder or on the GPU machine")
PY
