"""Packs the lidarxdp wheel (`cargo xtask python`) around an extension module cargo already built.

The extension module is compiled by the workspace's one release build (xtask's `build_release`),
so it shares the dependency features and the compiled artifacts of the tests, the daemon and the
bench. This script only lays the wheel out (PEP 427, binary distribution format):

* the package python/lidarxdp (`__init__.py`, the stubs, `py.typed`);
* the module as `lidarxdp/_lidarxdp.abi3.so`;
* `METADATA`, the core metadata written by pyproject-metadata from python/pyproject.toml's
  `[project]` table, the version given;
* `WHEEL`, tagged `cp39-abi3-<platform>`: CPython's stable ABI from 3.9 (pyo3's `abi3-py39`,
  python/Cargo.toml) on this machine's platform (`sysconfig`, e.g. `linux_x86_64`).

pypa's `wheel pack` then writes the RECORD and the archive into --out.

Usage: python pack_wheel.py --module PATH --version X.Y.Z --out DIR
"""

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

from pyproject_metadata import StandardMetadata

HERE = Path(__file__).resolve().parent
#: The oldest CPython the stable-ABI module loads in (pyo3 feature `abi3-py39`).
ABI3_FROM = "cp39"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", type=Path, required=True, help="the built extension module (.so)")
    ap.add_argument("--version", required=True, help="the package version (the workspace's)")
    ap.add_argument("--out", type=Path, required=True, help="directory the wheel is written to")
    a = ap.parse_args()

    pyproject = tomllib.loads((HERE / "pyproject.toml").read_text())
    project = pyproject["project"]
    project["version"] = a.version
    project["dynamic"] = [d for d in project.get("dynamic", []) if d != "version"]
    meta = StandardMetadata.from_pyproject(pyproject, project_dir=HERE)
    dist = f"{meta.canonical_name.replace('-', '_')}-{a.version}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / dist
        package = root / "lidarxdp"
        shutil.copytree(HERE / "lidarxdp", package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        shutil.copy(a.module, package / "_lidarxdp.abi3.so")
        info = root / f"{dist}.dist-info"
        info.mkdir()
        (info / "METADATA").write_bytes(bytes(meta.as_rfc822()))
        (info / "WHEEL").write_text(
            "Wheel-Version: 1.0\n"
            "Generator: lidarxdp python/pack_wheel.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: {ABI3_FROM}-abi3-{platform}\n"
        )
        a.out.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "wheel", "pack", "--dest-dir", str(a.out), str(root)], check=True)


if __name__ == "__main__":
    main()
