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


# ---------------------------------------------------------------- the container: its commands are the README's

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined, comments dropped."""
    found, pending = [], ""
    for raw in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        op, _, args = (pending + line).partition(" ")
        found.append((op.upper(), args.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return found


def args_of(instructions, op: str) -> list[str]:
    return [a for o, a in instructions if o == op]


def exec_form(args: str) -> list[str]:
    import json

    assert args.startswith("["), f"not exec form (no shell, signals reach streamlit): {args}"
    return json.loads(args)


def readme_run_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Run the app", 1)[1].split("\n## ", 1)[0]


def readme_command(prefix: str) -> list[str]:
    import shlex

    prose = re.sub(r"```.*?```", "", readme_run_section(), flags=re.S)  # inline commands, not the set-up block
    spans = [s for s in re.findall(r"`([^`]+)`", prose) if s.startswith(prefix)]
    assert len(spans) == 1, f"the README's Run the app section should give `{prefix}...` once: {spans}"
    return shlex.split(spans[0])


def env_of(instructions) -> dict[str, str]:
    import shlex

    env = {}
    for args in args_of(instructions, "ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            env[key] = value
    return env


def test_the_container_installs_and_runs_what_the_readme_says(monkeypatch):
    import shlex
    import tomllib

    d = dockerfile()
    assert args_of(d, "FROM") == ["python:3.11-slim"]
    # the install: the README's CPU-only command (flags that only keep the image small aside)
    (install,) = [a for a in args_of(d, "RUN") if "pip install" in a]
    pip = [w for w in shlex.split(install.split("&&")[0]) if w != "--no-cache-dir"]
    pip[-1] = Path(pip[-1]).name  # copied to /tmp/requirements-cpu.txt, removed after the install
    assert pip == readme_command("pip install -r requirements-cpu.txt")
    sources = [shlex.split(a)[0] for a in args_of(d, "COPY")]
    assert "requirements-cpu.txt" in sources and "requirements.txt" not in sources  # CPU-only torch, never CUDA's
    # the run: the README's `streamlit run app.py`, with the production settings on the command line
    run = exec_form(args_of(d, "CMD")[-1])
    assert run[:3] == ["streamlit", "run", "app.py"]
    assert "streamlit run app.py" in readme_run_section()
    flags = dict(f.removeprefix("--").split("=", 1) for f in run[3:])
    assert flags["server.headless"] == "true" and flags["server.fileWatcherType"] == "none"
    assert flags["server.address"] == "0.0.0.0"
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    for key, value in flags.items():  # never contradicts the app's own config file
        section, name = key.split(".")
        if name in config.get(section, {}):
            assert str(config[section][name]).lower() == value, key
    port = flags["server.port"]
    assert args_of(d, "EXPOSE") == [port]
    (health,) = args_of(d, "HEALTHCHECK")
    assert f"127.0.0.1:{port}/_stcore/health" in health and " CMD " in f" {health}"
    # a non-root user runs it
    users = args_of(d, "USER")
    assert users and users[-1] not in ("root", "0")
    assert [o for o, _ in d].index("USER") > max(i for i, (o, _) in enumerate(d) if o == "RUN")
    # the README's build and run commands fit this file: its path, the port, the volumes
    build = readme_command("docker build")
    assert build[build.index("-f") + 1] == "deploy/Dockerfile" and build[-1] == "."
    docker_run = readme_command("docker run")
    assert docker_run[docker_run.index("-p") + 1] == f"{port}:{port}"
    mounts = [docker_run[i + 1].split(":", 1)[1] for i, w in enumerate(docker_run) if w == "-v"]
    env = env_of(d)
    monkeypatch.setenv("TE_MODELS_DIR", env["TE_MODELS_DIR"])
    from core.serve.paths import corpora_dir, user_models_dir
    volumes = sorted(exec_form(args_of(d, "VOLUME")[0]))
    assert volumes == sorted(mounts) == sorted([str(user_models_dir()), str(corpora_dir())])
    # the header comment shows the same two commands
    header = (ROOT / "deploy" / "Dockerfile").read_text()
    assert " ".join(build) in header and " ".join(docker_run) in header


def test_the_image_holds_the_app_and_no_corpus():
    import shlex

    d = dockerfile()
    sources = [s for a in args_of(d, "COPY") for s in shlex.split(a)[:-1] if not s.startswith("--")]
    assert "." not in sources  # named folders only: nothing unexpected (a corpus, a .venv, models/) slips in
    for src in sources:
        assert (ROOT / src).exists(), src
        assert not re.search(r"shakespeare|corpora|^models|data", src), src
    for needed in ["app.py", "ui", ".streamlit", "core", "pages", "assets"]:
        assert needed in sources, needed
    for module in ROOT.glob("*.py"):  # every top-level module the app may import
        assert module.name in sources, module.name
    assert not any(re.search(r"curl|wget|fetch|urllib", a) for a in args_of(d, "RUN"))  # nothing downloaded at build
