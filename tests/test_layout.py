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


def scoring_table() -> dict[str, set[str]]:
    """Concern inside `scoring/` → the concerns it may import, read from DESIGN's second table."""
    out = {}
    for line in (ROOT / "docs" / "DESIGN.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`scoring/") or cells[0] == "`scoring/`":
            continue
        may = set(re.findall(r"`(\w+)`", cells[-1]))
        for path in re.findall(r"`([\w/.]+)`", cells[0]):
            out[_concern(path.removeprefix("scoring/"))] = may
    return out


def _concern(relative: str) -> str:
    """`ingest/series.py` → `ingest`; `heat.py` → `heat`."""
    return relative.split("/")[0].removesuffix(".py")


def scoring_imports() -> dict[tuple[str, str], set[str]]:
    """(concern, concern it imports) → the modules that import it, function-local imports included."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in (ROOT / "scoring").rglob("*.py"):
        if path.name == "__init__.py" and path.parent.name == "scoring":
            continue
        concern = _concern(str(path.relative_to(ROOT / "scoring")))
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            parts = node.module.split(".")
            if parts[0] != "scoring":
                continue
            targets = [alias.name for alias in node.names] if len(parts) == 1 else [parts[1]]
            for target in targets:
                if target != concern:
                    found.setdefault((concern, target), set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_scoring_table_names_every_concern():
    concerns = {_concern(str(p.relative_to(ROOT / "scoring"))) for p in (ROOT / "scoring").iterdir()
                if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())} - {"__init__"}
    assert concerns == set(scoring_table())


def test_each_concern_in_scoring_imports_only_what_its_row_allows():
    table = scoring_table()
    broken = sorted(f"{concern} imports {other} ({', '.join(sorted(where))})"
                    for (concern, other), where in scoring_imports().items() if other not in table[concern])
    assert not broken, broken


def test_the_scoring_check_sees_the_imports_it_judges():
    assert ("advice", "heat") in scoring_imports() and ("ingest", "policy") in scoring_imports()
    assert "advice" not in scoring_table()["ingest"]
