"""bench.code_health on a tiny fake tree written here (not on the repository, whose sizes others change; CI runs it on
the repository, .ci/run): which files, page folders and functions it names, for what, and its exit status."""
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


def function(name: str, body_lines: int) -> list[str]:
    """A function of ``body_lines + 1`` lines (its def and its body)."""
    return [f"def {name}():", *(f"    y{i} = {i}" for i in range(body_lines - 1)), "    return 0"]


def test_a_function_over_60_lines_is_named_and_fails_unless_excused(tmp_path, monkeypatch, capsys):
    root = tree(tmp_path)
    # 60 lines is the limit (def to last line, decorators not counted); 61 breaks it, also as a method
    write(root, "core/nn/f.py", ["import functools", "@functools.cache", *function("fits", 59),
                                 "class C:", *("    " + line for line in function("long", 60)), *function("over", 60)])
    assert broken(root) == {"core/nn/f.py": ["function C.long (line 64) is 61 lines, over 60",
                                             "function over (line 125) is 61 lines, over 60"]}
    assert code_health.main([], root=root) == 1
    monkeypatch.setattr(code_health, "EXCEPTIONS", {"core/nn/f.py::C.long": "a reason", "core/nn/f.py::over": "x",
                                                    "core/nn/gone.py::f": "stale"})
    capsys.readouterr()
    assert broken(root) == {} and code_health.main([], root=root) == 0
    out = capsys.readouterr().out
    assert "excused, a reason" in out and "'core/nn/gone.py::f' excuses nothing now" in out


def test_a_page_folder_over_700_lines_and_its_page_over_250_fail(tmp_path):
    root = tree(tmp_path)
    write(root, "pages/big.py", lines(250))
    write(root, "pages/big/view.py", lines(450))
    assert broken(root) == {}  # 700 lines in the page and its folder, each file at its own limit
    write(root, "pages/big/parts.py", lines(1))
    write(root, "pages/big.py", lines(251))
    write(root, "pages/big/figures.py", lines(451))
    assert broken(root) == {"pages/big/": ["page folder over 700 lines"], "pages/big.py": ["over 250 lines"],
                            "pages/big/figures.py": ["over 450 lines"]}
    assert code_health.main([], root=root) == 1

