"""The Binder set-up: what repo2docker reads, and where the README's link lands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_binder_environment_pins_a_python_with_h5py_wheels() -> None:
    env = (ROOT / "binder" / "environment.yml").read_text()
    assert re.search(r"^\s*-\s*python=3\.1[12]\s*$", env, re.M), env
    assert re.search(r"^\s*-\s*nodejs", env, re.M)  # the extension is built during the install
    post = (ROOT / "binder" / "postBuild").read_text()
    assert 'pip install --no-cache-dir ".[lab,demo]"' in post
    assert (ROOT / "binder" / "postBuild").stat().st_mode & 0o111, "postBuild must be executable"


def test_readme_binder_links_open_an_existing_notebook_in_lab() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"https://mybinder\.org/v2/gh/[^\s)`]+", readme)
    assert len(links) >= 2  # the badge and the plain link
    for link in links:
        path = re.fullmatch(
            r"https://mybinder\.org/v2/gh/[^/]+/ipy_resume/HEAD\?urlpath=lab/tree/(.+)", link
        )
        assert path, link
        assert (ROOT / path.group(1)).is_file(), link
