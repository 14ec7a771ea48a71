"""Checks on the repository's own files (a fresh clone is what CI tests)."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(rb"^(<<<<<<< |=======$|>>>>>>> )", re.MULTILINE)


def test_no_merge_conflict_markers_in_tracked_files():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.split(b"\0")
    marked = []
    for name in filter(None, files):
        path = REPO / name.decode()
        if path.is_file() and MARKER.search(path.read_bytes()):
            marked.append(name.decode())
    assert marked == [], f"merge conflict markers left in: {marked}"
