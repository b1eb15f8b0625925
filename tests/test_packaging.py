"""Package metadata (issue 15): a license file and the metadata a package index shows."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_license_and_metadata():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in meta["classifiers"])
