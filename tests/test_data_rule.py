"""The corpus stays out of the repository: no committed file quotes a line of it."""
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_corpus_line_is_committed(corpus_text):
    lines = {ln.strip() for ln in corpus_text.splitlines() if len(ln.strip()) >= 30}
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:  # not a git checkout: look at the source tree instead
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts]
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix in {".safetensors", ".png", ".zip"} or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for raw in text.splitlines():
            for piece in raw.replace("\\n", "\n").splitlines():
                if piece.strip().strip("\"',") in lines:
                    hits.append(f"{name}: {piece.strip()[:60]}")
    assert not hits, hits[:5]
    assert not any(Path(f).name == "tinyshakespeare.txt" for f in files)
