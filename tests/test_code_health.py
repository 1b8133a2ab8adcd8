"""bench.code_health on a tiny fake tree written here (not on the repository, whose sizes others change): which
files it names, for what, and its exit status."""
from pathlib import Path

from bench import code_health


def write(root: Path, rel: str, lines: list[str]):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def lines(n: int) -> list[str]:
    return [f"x{i} = {i}" for i in range(n)]


def tree(root: Path, page_lines: int = 250, module_lines: int = 450, cache: str | None = None) -> Path:
    write(root, "app.py", lines(10))
    write(root, "pages/home.py", ["import streamlit as st", *(lines(page_lines - 1))])
    # a page that names the caches only in a comment and a string: not a use
    write(root, "pages/quiet.py", ["import streamlit as st", "# st.cache_data would be wrong here",
                                   "st.markdown('st.cache_resource is for ui/')"])
    write(root, "core/analysis/big.py", lines(module_lines))
    write(root, "ui/helpers.py", ["import streamlit as st", "@st.cache_resource", "def f():", "    return 1"])
    if cache:
        write(root, "pages/cached.py", ["import streamlit as st", *cache.splitlines()])
    return root


def broken(root: Path) -> dict[str, list[str]]:
    return {r["path"]: r["broken"] for r in code_health.check(root=root) if r["broken"]}


def test_a_tree_at_the_limits_passes_with_status_0(tmp_path, capsys):
    root = tree(tmp_path)  # a page of exactly 250 lines, a module of exactly 450: at the limit, not over
    assert broken(root) == {}
    assert code_health.main([], root=root) == 0
    assert "0 file(s) break a limit" in capsys.readouterr().out


def test_a_page_over_250_and_a_module_over_450_lines_are_named_and_fail(tmp_path, capsys):
    root = tree(tmp_path, page_lines=251, module_lines=451)
    assert broken(root) == {"pages/home.py": ["over 250 lines"], "core/analysis/big.py": ["over 450 lines"]}
    assert code_health.main([], root=root) == 1
    out = capsys.readouterr().out
    assert "2 file(s) break a limit" in out and "pages/home.py" in out and "core/analysis/big.py" in out


def test_st_cache_in_a_page_fails_as_decorator_call_or_import_but_not_in_ui(tmp_path):
    for k, (source, line) in enumerate((("@st.cache_data(max_entries=4)\ndef f():\n    return 1", 2),
                         ("g = st.cache_resource(show_spinner=False)(len)", 2),
                         ("x = 1\nfrom streamlit import cache_data", 3),
                         ("import streamlit\nh = streamlit.cache_resource(len)", 3))):
        root = tree(tmp_path / str(k), cache=source)
        assert broken(root) == {"pages/cached.py": [f"st.cache_* in a page (line {line})"]}, source
        assert code_health.main([], root=root) == 1
