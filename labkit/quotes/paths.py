"""Where the quotes and their sources live: the notebooks, their recorded values, the timing
report and the pages whose prose is checked."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
RESULTS_DIR = NOTEBOOKS_DIR / "results"
TIMES_JSON = ROOT / "docs" / "teaching" / "section_times.json"
#: The pages outside the notebooks whose quotes are checked.
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "teaching").glob("*.md")))

__all__ = ["NOTEBOOKS_DIR", "PAGES", "RESULTS_DIR", "ROOT", "TIMES_JSON"]
