import ast
import os
import sys
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# the app's config shows users only an error's type (.streamlit/config.toml); the tests read the whole message
os.environ.setdefault("STREAMLIT_CLIENT_SHOW_ERROR_DETAILS", "full")
# every run the app starts asks core.nn.precision.run_precision(), "auto" by default: bf16 where a probe measures it
# faster. The suite's parity, oracle and shipped-number tests compare fp32 numbers, so the whole suite (and every
# process it starts: they inherit this) runs fp32; tests/test_precision.py asks for "auto" by argument where it
# tests the probe itself.
os.environ["TE_PRECISION"] = "float32"

from core.data.corpus import shakespeare_path  # noqa: E402
from core.nn.config import ModelConfig  # noqa: E402
from core.nn.model import Transformer  # noqa: E402

SHIPPED = ROOT / "assets" / "models" / "shakespeare-char"
APP = str(ROOT / "app.py")


def page_file(page: str) -> str:
    """The script of a page from its name ("attention") or its path ("pages/attention.py"); the page's own modules
    live in the folder beside it (pages/attention/)."""
    return f"pages/{page.removeprefix('pages/').removesuffix('.py')}.py"


HOME = page_file("home")  # app.py's default page: the first run already shows it


@pytest.fixture(autouse=True)
def _main_module_kept():
    """Streamlit's script runner makes the script it runs the process's ``__main__`` and leaves it there. After an
    AppTest, a process started with "spawn" in the same test worker would re-run that script as its main (an
    AppTest.from_function script then fails at once on its undefined arguments): each test ends with the main
    module it started with."""
    main = sys.modules.get("__main__")
    yield
    if main is not None and sys.modules.get("__main__") is not main:
        sys.modules["__main__"] = main


@pytest.fixture
def tiny_model():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=11, n_ctx=16, d_model=24, n_heads=3, n_layers=2)
    return Transformer(cfg).eval()


@pytest.fixture(scope="session")
def corpus_text():
    path = shakespeare_path()
    if path is None:
        pytest.skip("Tiny Shakespeare not found (set TE_CORPUS or place it at ../shared/data/tinyshakespeare.txt)")
    return path.read_text(encoding="utf-8")


def app_pages() -> list[tuple[str, str]]:
    """(script, title) of every st.Page in app.py's PAGES (a list, or sections: a dict of lists), in order, read
    from app.py's source."""
    tree = ast.parse((ROOT / "app.py").read_text())
    pages = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "PAGES" for t in node.targets))
    calls = [c for section in pages.values for c in section.elts] if isinstance(pages, ast.Dict) else pages.elts
    found = []
    for call in calls:
        assert isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "Page", ast.unparse(call)
        title = next(k.value.value for k in call.keywords if k.arg == "title")
        found.append((call.args[0].value, title))
    return found


def _page_opener(mp: pytest.MonkeyPatch):
    def open_page(page: str, timeout: float = 60, models_dir=None, state: dict | None = None,
                  query: dict | None = None) -> AppTest:
        """An AppTest of app.py showing ``page`` ("pages/attention.py", or its name: see page_file), after a run
        without exception.

        models_dir: TE_MODELS_DIR for this test (user models are saved and discovered there).
        state: session state set before the first run, when app.py still runs (AppTest runs app.py only on
        its first run while a pages/ folder exists; later runs execute the page alone), e.g. the picker's
        {"te_model_name": "copy"}.
        query: the URL's query string (a link), set before the first run and kept for the page's."""
        if models_dir is not None:
            mp.setenv("TE_MODELS_DIR", str(models_dir))
        page = page if page == "app.py" else page_file(page)
        at = AppTest.from_file(APP, default_timeout=timeout)
        for key, value in (state or {}).items():
            at.session_state[key] = value
        for key, value in (query or {}).items():
            at.query_params[key] = value
        at.run()
        if page not in (HOME, "app.py"):
            at.switch_page(page)
            for key, value in (query or {}).items():  # a page switch starts from a clean query string
                at.query_params[key] = value
            at.run()
        assert not at.exception, f"{page}: {at.exception[0].message}"
        return at

    return open_page


@pytest.fixture
def open_page(monkeypatch):
    """Factory: ``open_page("pages/training.py", models_dir=tmp_path)`` -> AppTest on that page."""
    return _page_opener(monkeypatch)


@pytest.fixture(scope="module")
def open_page_once():
    """The same factory for module-scoped fixtures (an environment it sets lasts for the module)."""
    with pytest.MonkeyPatch.context() as mp:
        yield _page_opener(mp)


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance with 2 CPUs for the whole test session (started on first use: ~5 s, ~0.5 GB)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -r requirements-dev.txt)")
    from core.training.study_engines import ray_runtime_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20,
             runtime_env=ray_runtime_env())
    yield ray
    ray.shutdown()


# The files that take longest, started first: with the suite spread over the cores (pytest.ini: -n auto
# --dist loadfile --no-loadscope-reorder, whole files per worker, handed out in this order), a long file handed out
# last would run alone at the end while the other workers sit idle. Within a file the order stays as written. The
# order is the files' total time in a quiet full run (pytest --junitxml, its test times summed per file), longest
# first; a file not named here follows in alphabetical order.
LONG_FILES_FIRST = ("test_induction_live.py", "test_bench_smoke.py", "test_bad_input.py", "test_replicas.py",
                    "test_browser.py", "test_training_job.py", "test_study.py", "test_browser_attention.py",
                    "test_browser_training.py", "test_browser_pages.py", "test_browser_forecast.py",
                    "test_page_scaling_fit.py", "test_page_training.py", "test_browser_class_hall.py",
                    "test_browser_classroom.py", "test_study_job.py", "test_command_lines.py", "test_load.py",
                    "test_features_bounds.py", "test_links_pages.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))  # stable: files stay whole
