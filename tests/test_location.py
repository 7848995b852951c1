"""Which store a front end opens: one rule, :func:`ipy_resume.store.location.store_location`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipy_resume.store import location
from ipy_resume.store.location import STORE_DIRNAME, STORE_ENV, store_location


def test_the_default_store_is_in_the_notebooks_folder(tmp_path: Path) -> None:
    assert store_location(folder=tmp_path, env={}) == tmp_path.resolve() / STORE_DIRNAME


def test_a_relative_variable_is_taken_from_the_notebooks_folder_not_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebooks, elsewhere = tmp_path / "notebooks", tmp_path / "elsewhere"
    notebooks.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert store_location(folder=notebooks, env={STORE_ENV: "runs"}) == notebooks / "runs"
    assert store_location(folder=notebooks, env={STORE_ENV: "../runs"}) == tmp_path / "runs"
    # without a notebook's folder, the process's is the kernel's (papermill, the CLI)
    assert store_location(env={STORE_ENV: "runs"}) == elsewhere / "runs"


def test_a_named_store_wins_and_is_taken_from_the_process_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    notebooks = tmp_path / "notebooks"
    env = {STORE_ENV: str(tmp_path / "from-env")}
    assert store_location("typed", folder=notebooks, env=env) == tmp_path / "typed"
    assert store_location("", folder=notebooks, env=env) == tmp_path / "from-env"


def test_an_absolute_or_home_variable_ignores_the_folder(tmp_path: Path) -> None:
    env = {STORE_ENV: str(tmp_path / "shared")}
    assert store_location(folder=Path("/elsewhere"), env=env) == tmp_path / "shared"
    home = store_location(folder=tmp_path, env={STORE_ENV: "~/ipy-store"})
    assert home == Path("~/ipy-store").expanduser().resolve()


def test_the_kernels_default_root_follows_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(STORE_ENV, "runs")
    assert location.default_root() == store_location(folder=tmp_path) == tmp_path / "runs"
    monkeypatch.delenv(STORE_ENV)
    assert location.default_root() == tmp_path / STORE_DIRNAME
