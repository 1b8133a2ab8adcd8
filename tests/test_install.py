"""Installs the way users get them (issue 19): the CPU-only requirements keep requirements.txt's pins, and
the container installs and runs what the README says."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def requirements(name: str) -> tuple[dict[str, str], list[str]]:
    """({package: version pin}, option lines) of a requirements file; every package line must be an exact pin."""
    pins, options = {}, []
    for raw in (ROOT / name).read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            options.append(line)
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+!-]+)", line)
        assert m, f"{name}: not an exact pin: {line!r}"
        key = re.sub(r"[-_.]+", "-", m[1]).lower()
        assert key not in pins, f"{name}: {key} pinned twice"
        pins[key] = m[2]
    return pins, options


def test_cpu_requirements_pin_the_same_versions_with_torchs_cpu_build():
    default, default_options = requirements("requirements.txt")
    cpu, cpu_options = requirements("requirements-cpu.txt")
    assert default_options == []  # the default install stays plain: CI and the offline install use it
    assert cpu_options == [f"--extra-index-url {CPU_INDEX}"]  # PyPI for the rest, PyTorch's index for torch
    assert set(cpu) == set(default)
    assert {k: v for k, v in cpu.items() if k != "torch"} == {k: v for k, v in default.items() if k != "torch"}
    assert "+" not in default["torch"]
    assert cpu["torch"] == default["torch"] + "+cpu"  # the same release, PyTorch's CPU-only build of it
