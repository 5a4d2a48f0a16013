"""Packaging metadata: an SPDX license with its full text, authors, classifiers, py.typed, and a
wheel that ships them (built offline from a copy of the sources)."""
import glob
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO

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


def test_wheel_holds_license_py_typed_and_metadata(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("setuptools < 77 cannot build SPDX license metadata")
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
    (wheel,) = glob.glob(str(tmp_path / "dist" / "detaug-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "detaug/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    assert "Author: detaug developers" in metadata
    assert "Classifier: Typing :: Typed" in metadata


def test_detaug_convert_version(capsys):
    from importlib.metadata import version

    from detaug.cli.convert import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])  # no src/dst/--from/--to needed
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"detaug-convert {version('detaug')}"
