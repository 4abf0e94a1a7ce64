"""The Space as Hugging Face builds it: requirements.txt resolves to wheels for the Python that
the README's front matter names (Spaces' default where it names none), and that Python agrees
with pyproject's requires-python, the README's text and CI.

The resolve asks the package registry, as the Space's builder does: `pip install --dry-run` for
that Python on manylinux x86_64, binary wheels only, nothing installed. It skips only when the
registry cannot be reached at all.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REQUIREMENTS = ROOT / "requirements.txt"
PYPROJECT = ROOT / "pyproject.toml"
CI = ROOT / ".ci" / "run"

# Spaces' python_version when the front matter names none (hub-docs, Spaces Configuration
# Reference: "Defaults to 3.10").
SPACES_DEFAULT_PYTHON = "3.10"
PYPI = "https://pypi.org/simple/"

# pip matches platform tags literally and does not widen manylinux_2_28 to the older glibc
# tags a host with glibc 2.28 also runs: every one is named, with the legacy aliases.
MANYLINUX = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]

# pip settings that say how to reach the registry, not what to resolve: kept from this
# machine's configuration. Everything else (find-links, extra indexes, a constraint file) is
# this machine's, not the Space builder's, and would let a local wheel hide a missing one.
TRANSPORT = {"cert", "client-cert", "proxy", "trusted-host", "timeout", "default-timeout",
             "retries", "index-url"}  # fmt: skip


def front_matter() -> dict:
    return yaml.safe_load(README.read_text().split("---")[1])


def space_python() -> str:
    """The Python the Space builds with: the front matter's python_version, else the default."""
    return str(front_matter().get("python_version", SPACES_DEFAULT_PYTHON))


def requires_python() -> SpecifierSet:
    return SpecifierSet(tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"])


def requirements() -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def builder_env() -> dict[str, str]:
    """The environment for a pip that resolves like the Space's builder: no pip configuration
    files or PIP_* variables, except the settings that reach the registry from here."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    for line in listed.splitlines():  # "global.cert='/etc/ssl/...'" or ":env:.cert='...'"
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in TRANSPORT:
            env["PIP_" + name.upper().replace("-", "_")] = value.strip("'\"")
    env["PIP_CONFIG_FILE"] = os.devnull  # pip then reads no configuration file at all
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def registry_unreachable(env: dict[str, str]) -> str | None:
    """Why the registry cannot be reached from here, or None when it answers at all."""
    index = env.get("PIP_INDEX_URL", PYPI).rstrip("/") + "/pip/"
    context = ssl.create_default_context(cafile=env.get("PIP_CERT"))
    try:
        urllib.request.urlopen(index, timeout=15, context=context).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (OSError, ValueError) as e:
        return f"the package registry ({index}) cannot be reached from here: {e}"
    return None


def test_requirements_resolve_to_wheels_for_the_space_python(tmp_path):
    env = builder_env()
    if reason := registry_unreachable(env):
        pytest.skip(reason)
    python = space_python()
    report = tmp_path / "report.json"
    platforms = [arg for tag in MANYLINUX for arg in ("--platform", tag)]
    # --target installs nothing under --dry-run; older pips refuse --platform without it
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
               "--target", str(tmp_path / "target"), "--ignore-installed",
               "--report", str(report), "--python-version", python,
               "--implementation", "cp", *platforms, "--only-binary=:all:",
               "-r", str(REQUIREMENTS)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, (
        f"requirements.txt does not install on Python {python} (the Space's):\n"
        + done.stderr[-3000:]
    )
    installs = {
        canonicalize_name(item["metadata"]["name"]): item
        for item in json.loads(report.read_text())["install"]
    }
    for requirement in requirements():
        item = installs[canonicalize_name(requirement.name)]
        assert item["metadata"]["version"] in requirement.specifier, requirement
    assert all(item["download_info"]["url"].endswith(".whl") for item in installs.values())


def test_the_space_python_is_named_and_agrees_with_pyproject_readme_and_ci():
    named = front_matter().get("python_version")
    # YAML reads an unquoted 3.10 as the number 3.1: the version must stay a string
    assert isinstance(named, str), f"python_version should be a string, got {named!r}"
    assert Version(named) in requires_python()
    floor = re.fullmatch(r">=\s*(3\.\d+)", str(requires_python()))
    assert floor, "requires-python is a single lower bound"
    quickstart = README.read_text().split("## Quickstart", 1)[1]
    assert f"(Python {floor.group(1)}+" in quickstart
    space_section = README.read_text().split("## The Space", 1)[1].split("\n## ", 1)[0]
    assert f"Python {named}" in space_section
    assert "python_version" in CI.read_text()  # CI reads the same front matter field


def test_the_pins_shared_by_requirements_and_pyproject_are_the_same():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    listed = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        listed += extra
    pinned = {}
    for line in listed:
        requirement = Requirement(line)
        pinned.setdefault(canonicalize_name(requirement.name), set()).add(str(requirement))
    for requirement in requirements():
        same = pinned.get(canonicalize_name(requirement.name), {str(requirement)})
        assert same == {str(requirement)}, f"{requirement} in requirements.txt, {same} here"
