"""One upload limit: server.maxUploadSize in .streamlit/config.toml is the only place the number is written;
the server enforces it, and the training page's uploader, its help text, its paste box and the corpus
check all read the effective value from Streamlit's config (issue 12)."""
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from core.data.corpus import check_corpus_bytes

ROOT = Path(__file__).resolve().parent.parent


def effective_limit_mb() -> int:
    """The value Streamlit itself uses when run from the repository (config file plus any overrides)."""
    out = subprocess.run([sys.executable, "-c", "from streamlit import config; config.get_config_options(force_reparse=True);"
                          "print(config.get_option('server.maxUploadSize'))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return int(out.stdout.split()[-1])


def test_the_page_uses_the_servers_effective_limit_everywhere(tmp_path, open_page):
    limit = effective_limit_mb()
    assert limit == tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]["maxUploadSize"]
    at = open_page("pages/training.py", models_dir=tmp_path)
    from streamlit import config
    assert config.get_option("server.maxUploadSize") == limit  # AppTest reads the same config
    at.radio(key="train_corpus").set_value("upload").run()
    uploader = at.get("file_uploader")[0].proto
    assert uploader.max_upload_size_mb == limit
    assert uploader.help == f"At most {limit} MiB of UTF-8 text."
    at.radio(key="train_corpus").set_value("paste").run()
    assert at.text_area(key="train_paste").max_chars == limit * 2**20
    assert not at.exception


def test_the_core_check_refuses_one_byte_over_the_limit():
    limit = effective_limit_mb() * 2**20
    text = "ab\n" * (limit // 3) + "a" * (limit % 3)
    assert len(text.encode()) == limit
    assert check_corpus_bytes(text.encode(), "x.txt", limit) == text
    with pytest.raises(ValueError, match="the limit is"):
        check_corpus_bytes((text + "b").encode(), "x.txt", limit)


def test_the_number_is_written_nowhere_else():
    limit = effective_limit_mb()
    for path in [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "core").rglob("*.py")]:
        text = path.read_text()
        assert "MAX_CORPUS_BYTES" not in text and "max_upload_size=" not in text.replace("max_upload_size=limit_mb", ""), path
        assert f"{limit} MiB" not in text and f"{limit} * 2**20" not in text, path
