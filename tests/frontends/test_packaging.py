"""Packaging metadata: an SPDX license with its full text, authors, classifiers, py.typed, and a
wheel that ships them (built offline from a copy of the sources)."""
import glob
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def project():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_license_is_spdx_with_the_full_apache_text():
    meta = project()["project"]
    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    with open(os.path.join(REPO, "LICENSE"), encoding="utf-8") as f:
        text = f.read()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply" in text
    assert len(text.splitlines()) == 202  # the canonical file, verbatim


def test_authors_classifiers_and_no_invented_urls():
    meta = project()["project"]
    assert meta["authors"] == [{"name": "detaug developers"}]
    assert "Typing :: Typed" in meta["classifiers"]
    assert any(c.startswith("Development Status ::") for c in meta["classifiers"])
    assert "urls" not in meta  # there is no public home page or repository yet


def test_py_typed_ships():
    assert os.path.isfile(os.path.join(REPO, "detaug", "py.typed"))
    assert "py.typed" in project()["tool"]["setuptools"]["package-data"]["detaug"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built offline from a copy of the sources (no examples/, no tests/)."""
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("setuptools < 77 cannot build SPDX license metadata")
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(os.path.join(REPO, name), src / name)
    for pkg in ("detaug", "readers"):
        shutil.copytree(os.path.join(REPO, pkg), src / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(src), "-w", str(tmp_path / "dist")], check=True, cwd=tmp_path,
                   capture_output=True, timeout=120)
    (path,) = glob.glob(str(tmp_path / "dist" / "detaug-*.whl"))
    return path


# the tests of the module fixture wheel run on one pytest-xdist worker (the wheel is built once)
@pytest.mark.xdist_group("wheel")
def test_wheel_holds_license_py_typed_and_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "detaug/py.typed" in names and "detaug/fn.pyi" in names
    assert "detaug/visualize.py" in names and "detaug/cli/sample.py" in names
    assert not any(n.startswith(("examples/", "tests/")) for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    assert "Author: detaug developers" in metadata
    assert "Classifier: Typing :: Typed" in metadata


@pytest.mark.xdist_group("wheel")
def test_demo_runs_from_a_non_editable_install(wheel, tmp_path):
    """``pip install detaug`` (the wheel, into a fresh virtual environment that sees this
    interpreter's numpy, Pillow, ... but not the repository) then ``detaug demo`` from an
    unrelated folder: no examples/data there, so the demo generates its sample (in the cache
    folder it names) and draws it."""
    venv = tmp_path / "venv"
    # without pip of its own (ensurepip takes most of this test's time): this interpreter's pip
    # installs into it (pip --python)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    py = venv / "bin" / "python"
    # the dependencies come from this interpreter's site-packages (a venv's, not the base
    # interpreter's that --system-site-packages would give): its folders on the new venv's path,
    # without running their .pth files, so that this checkout's editable install stays unseen
    import sysconfig

    theirs = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (pathlib.Path(theirs) / "_deps_of_the_test.pth").write_text("\n".join(sorted(ours)) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                    "--no-index", "--ignore-installed", wheel], check=True, capture_output=True,
                   timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DETAUG_CACHE")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = subprocess.run([str(venv / "bin" / "detaug"), "demo", "--batches", "1", "--batch-size", "4",
                        "--grid", "3", "--cell", "64", "--device", "cpu", "--out", "d.png"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    sample = tmp_path / "cache" / "detaug" / "sample-voc-v1"
    assert f"voc sample, 40 images, 4 classes ({sample})" in r.stdout, r.stdout
    assert "wrote d.png (3x3 grid, 192x192 px)" in r.stdout
    where = subprocess.run([str(py), "-c", "import detaug; print(detaug.__file__)"], cwd=work,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where  # the installed copy ran, not the repository's
    from PIL import Image

    assert Image.open(work / "d.png").size == (192, 192)


def test_detaug_convert_version(capsys):
    from importlib.metadata import version

    from detaug.cli.convert import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])  # no src/dst/--from/--to needed
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"detaug-convert {version('detaug')}"


def test_install_extras_choose_the_torch_build_on_purpose():
    """[torchvision] exists; the README's install table gives the CPU build from PyTorch's CPU
    index before it (a matching torch / torchvision pair) and the CUDA build with [gpu]."""
    extras = project()["project"]["optional-dependencies"]
    assert extras["torchvision"] == ["torch>=2.1", "torchvision>=0.16"]
    assert "torch>=2.1" in extras["torch"]
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    install = readme[readme.index("## Install\n"):readme.index("## Example\n")]
    assert ("`pip install torch==2.13.0 torchvision==0.28.0 --index-url "
            "https://download.pytorch.org/whl/cpu`, then `pip install \"detaug[torchvision]\"`") in install
    assert '`pip install "detaug[gpu,torchvision]"`' in install
    # the torch the README pins is the one CI installs
    # (CI runs the README's test command as written: .ci/run reads it from the README)
    assert "pip install torch==2.13.0 && pip install -e " in readme
    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
        assert ('pip install torch==2.13.0 && pip install -e ".[test,tf]" && '
                'KERAS_BACKEND=torch python -m pytest -q -n auto') in f.read()


@pytest.mark.parametrize("module", ["detaug.visualize", "detaug.adapters.keras",
                                    "detaug.cli.progress", "detaug.cli.sample"])
def test_public_functions_are_type_annotated(module):
    """Every parameter and return of the module's public functions and classes' public methods
    carries a type hint (py.typed promises them to type checkers and IDEs)."""
    import importlib
    import inspect

    mod = importlib.import_module(module)
    objs = {n: getattr(mod, n) for n in dir(mod) if not n.startswith("_")}
    if module == "detaug.adapters.keras":
        pytest.importorskip("keras")
        objs["DetaugSequence"] = mod.DetaugSequence
    missing = []
    for name, obj in objs.items():
        if getattr(obj, "__module__", None) != module:
            continue
        if inspect.isclass(obj):
            funcs = [(f"{name}.{k}", v) for k, v in vars(obj).items()
                     if inspect.isfunction(v) and (not k.startswith("_") or k == "__init__")]
            for base in obj.__mro__[1:]:  # the keras sequence's body is a mixin of this module
                if base.__module__ == module:
                    funcs += [(f"{name}.{k}", v) for k, v in vars(base).items()
                              if inspect.isfunction(v) and (not k.startswith("_") or k == "__init__")]
        elif inspect.isfunction(obj):
            funcs = [(name, obj)]
        else:
            continue
        for fname, f in funcs:
            sig = inspect.signature(f)
            missing += [f"{fname}({p})" for p, v in sig.parameters.items()
                        if p not in ("self", "cls") and v.annotation is inspect.Parameter.empty]
            if sig.return_annotation is inspect.Signature.empty:
                missing.append(f"{fname} -> ?")
    assert not missing, missing
