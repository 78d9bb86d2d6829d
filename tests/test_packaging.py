"""Packaging: the wheel holds every package and subpackage of the product, and the production
image, which leaves the simulator out, runs every command it is for without it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("gpu_balancer", "scoring", "calibration", "webhook", "descheduler", "certs", "nvml_exporter")
WITHOUT_SIM = "import sys; sys.modules['sim'] = None; from gpu_balancer.cli import main; sys.exit(main(sys.argv[1:]))"
"""A Python with the simulator absent, as in the production image (`import sim.x` fails)."""


def packages_on_disk(*tops: str) -> set[str]:
    return {str(init.parent.relative_to(ROOT)).replace("/", ".") for top in tops for init in (ROOT / top).rglob("__init__.py")}


def test_the_wheel_holds_every_package_and_subpackage(tmp_path):
    source = tmp_path / "src"  # a clean copy: setuptools' build/ in the checkout may hold stale modules
    for top in (*PRODUCT, "sim"):
        shutil.copytree(ROOT / top, source / top, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    files = set(zipfile.ZipFile(wheel).namelist())
    packaged = {name.rsplit("/", 1)[0].replace("/", ".") for name in files if name.endswith("/__init__.py")}
    assert packaged == packages_on_disk(*PRODUCT, "sim")
    assert {"scoring.ingest.signals", "descheduler.strategies", "sim.llm"} <= packaged
    assert not any(name.startswith("tests/") for name in files)


def test_the_image_copies_every_product_package_and_not_the_simulator():
    copied = set(re.findall(r"^COPY (\w+) \1$", (ROOT / "Dockerfile").read_text(), re.MULTILINE))
    assert copied == set(PRODUCT)


@pytest.mark.parametrize("argv", [["recording-rules"], ["webhook", "--help"], ["deschedule", "--help"],
                                  ["status", "--help"], ["nvml-exporter", "--help"], ["certs", "ensure", "--help"],
                                  ["calibrate", "--help"],
                                  ["--help"]])
def test_the_production_commands_run_without_the_simulator(argv):
    done = subprocess.run([sys.executable, "-c", WITHOUT_SIM, *argv], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", [["simulate", "--scenario", "llm-fleet"], ["fake-dcgm", "--scenario", "llm-fleet"],
                                  ["serving-curve", "--list"]])
def test_a_simulator_command_without_the_simulator_says_how_to_get_it(argv):
    done = subprocess.run([sys.executable, "-c", WITHOUT_SIM, *argv], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "pip install 'gpu-balancer[sim]'" in done.stderr
