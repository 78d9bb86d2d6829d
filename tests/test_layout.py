"""The package layout holds: each package imports only what `docs/DESIGN.md`'s "may import" column allows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"scoring", "webhook", "descheduler", "certs", "sim", "nvml_exporter", "gpu_balancer", "calibration"}


def allowed_imports() -> dict[str, set[str]]:
    """Package → the packages of ours it may import, read from the layout table."""
    out = {}
    for line in (ROOT / "docs" / "DESIGN.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not (match := re.fullmatch(r"`(\w+)/`", cells[0])):
            continue
        may = cells[-1]
        out[match[1]] = PACKAGES - {match[1]} if may == "everything" else set(re.findall(r"`(\w+)`", may))
    return out


def imported_packages(package: str) -> dict[str, set[str]]:
    """Package of ours → the modules of `package` that import it."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if (top := name.split(".")[0]) in PACKAGES and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_layout_table_names_every_package():
    assert PACKAGES <= set(allowed_imports())


def test_every_package_imports_only_what_the_layout_allows():
    allowed = allowed_imports()
    broken = {f"{package} imports {other} ({', '.join(sorted(where))})"
              for package in PACKAGES for other, where in imported_packages(package).items()
              if other not in allowed[package]}
    assert not broken, sorted(broken)


def test_the_check_sees_the_imports_it_judges():
    assert "scoring" in imported_packages("sim") and "calibration" in imported_packages("sim")
    assert "webhook" not in allowed_imports()["scoring"]


def test_the_product_does_not_import_the_offline_calibrator():
    assert all("calibration" not in imported_packages(package) for package in ("webhook", "descheduler", "scoring"))
