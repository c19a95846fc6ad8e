"""The package builds as a wheel (`python -m build`) that installs into a fresh venv, where `evonorm --help`
runs from the installed files (not this source tree)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.extras
@pytest.mark.slow
def test_wheel_builds_installs_and_runs(tmp_path):
    pytest.importorskip("build", reason="build is in the `test` extra")
    src = tmp_path / "src_copy"  # build from a copy: the build writes egg-info next to the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)], check=True,
                   capture_output=True, timeout=600)
    wheels = list(dist.glob("evonorm-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as whl:  # the CPU graph kernel is built from its source where it runs
        assert "evonorm/graph/csrc/graph_kernel.cpp" in whl.namelist()
        assert "evonorm/proxy/measured.json" in whl.namelist()  # a search's calibration line reads it
        assert "evonorm/presets.toml" in whl.namelist()  # every search preset is read from it
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheels[0]), "torch==2.13.0"], check=True,
                   capture_output=True, timeout=900)
    out = subprocess.run([str(venv / "bin" / "evonorm"), "--help"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "search" in out.stdout and "train" in out.stdout
    where = subprocess.run([str(py), "-c", "import evonorm.layers, sys; print(evonorm.layers.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True).stdout
    assert str(venv) in where and str(ROOT) not in where
    # a panel the installed package writes is one its `calibrate --panel` reads
    build = ("import dataclasses, pathlib; from evonorm.measure import panel as pn; "
             "s = dataclasses.replace(pn.with_dataset(pn.REFERENCE, 'synthetic'), steps=10, "
             "lr_warmup=2, seeds=(0,)); "
             "print(pn.build_panel(pathlib.Path('panel'), s, workers=2, layers=[(n, n) for n in "
             "('bn_relu', 'gn_relu', 'evonorm_s0')]))")
    made = subprocess.run([str(py), "-c", build], cwd=tmp_path, capture_output=True, text=True,
                          timeout=900)
    assert made.returncode == 0 and made.stdout.strip() == "0", made.stderr
    cal = subprocess.run([str(venv / "bin" / "evonorm"), "calibrate", "--preset", "tiny", "--seeds",
                          "1", "--random", "0", "--workers", "2", "--panel", "panel/panel.json",
                          "--out", "cal"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert cal.returncode == 0, cal.stderr
    assert "rank fidelity of tiny against the reference panel (3 layers, " in cal.stdout
