"""The docs cover what the code offers: every option, CLI command and error message.

A message is identified by its longest literal fragment (the text between the
f-string's placeholders); that fragment must appear in docs/troubleshooting.md.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ipy_resume"
DOCS = ROOT / "docs"

# Calls whose first argument is text a user reads.
MESSAGE_CALLS = {
    "UsageError",
    "message",
    "_say",
    "StoreError",
    "CorruptBlob",
    "MissingBlob",
    "Untrusted",
    "FormatTooNew",
    "ManifestError",
    "SaveError",
    "DecodeError",
    "KeyFileError",
    "StoreLocked",
    "TargetError",
    "RequestError",
    "StorePathError",
    "EncodeError",
    "Unfingerprintable",
}
MIN_FRAGMENT = 14


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _fragments(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        ]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _fragments(node.left) + _fragments(node.right)
    return []


def messages() -> Iterator[tuple[str, int, str]]:
    """(file, line, signature fragment) of every user-facing message in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            if _name(node.func) in MESSAGE_CALLS:
                text = node.args[0]
            elif _name(node.func) == "show_status" and len(node.args) > 1:
                text = node.args[1]  # show_status(host, text): a status line
            else:
                continue
            pieces = [" ".join(p.split()) for p in _fragments(text)]
            pieces = [p.strip(" ;:.,()'\"") for p in pieces]
            best = max(pieces, key=len, default="")
            if len(best) >= MIN_FRAGMENT:
                yield path.relative_to(ROOT).as_posix(), node.lineno, best


def docs_text() -> str:
    return " ".join(" ".join(p.read_text(encoding="utf-8").split()) for p in DOCS.glob("*.md"))


def test_every_error_message_is_documented() -> None:
    text = " ".join((DOCS / "troubleshooting.md").read_text(encoding="utf-8").split())
    missing = [f"{f}:{line}: {frag!r}" for f, line, frag in messages() if frag not in text]
    assert not missing, (
        "undocumented messages (add them to docs/troubleshooting.md):\n" + "\n".join(missing)
    )


def test_message_extraction_finds_the_known_ones() -> None:
    found = {frag for _, _, frag in messages()}
    assert any("will always execute" in frag for frag in found)
    assert any("from checkpoint" in frag for frag in found)  # status lines count too
    assert len(found) > 20


def magic_options() -> set[str]:
    from ipy_resume.frontends.magics import CheckpointMagics

    parser = CheckpointMagics.checkpoint.parser  # type: ignore[attr-defined]
    return {
        opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")
    } - {"--help"}


def cli_commands() -> set[str]:
    from ipy_resume.frontends.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)  # type: ignore[attr-defined]


def line_commands() -> set[str]:
    from ipy_resume.frontends.magics import LINE_USAGE

    return set(re.findall(r"(?:usage: %checkpoint |\| )([a-z]+)", LINE_USAGE))


@pytest.mark.parametrize("option", sorted(magic_options()))
def test_every_magic_option_is_documented(option: str) -> None:
    assert f"`{option}" in (DOCS / "user-guide.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", sorted(cli_commands()))
def test_every_cli_command_is_documented(command: str) -> None:
    assert f"ipy-resume {command}" in (DOCS / "user-guide.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", sorted(line_commands()))
def test_every_line_magic_command_is_documented(command: str) -> None:
    assert f"%checkpoint {command}" in (DOCS / "user-guide.md").read_text(encoding="utf-8")


def test_the_collectors_see_the_contract() -> None:
    assert {"--force", "--deps", "--explain"} <= magic_options()
    assert {"list", "show", "verify", "demo"} <= cli_commands()
    assert {"list", "restore", "verify"} <= line_commands()


README = ROOT / "README.md"
README_MAX_LINES = 400

# Wording of the project's own development history, which has no place in its files: a
# Jupyter *kernel* session is a legitimate term (the journal keeps one per event), the
# way the project was worked on is not. Written with \s+ so that this file does not match.
HISTORY_WORDING = [
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\bthis\s+session\b",
        r"\bsessions?\s+(?:before|ago)\b",
        r"\b(?:previous|last|next|earlier|later|development)\s+sessions?\b",
        r"\bsession[\s_-]?\d+\b",
        r"\bstop\s+\d+\b",
        r"\bs\d{2}\b",
        r"\w-s\d+\b",
    )
]


def tracked_files() -> list[Path]:
    """The files git tracks (none outside a checkout, e.g. in an unpacked sdist)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [ROOT / name for name in out.decode().split("\0") if name]


def history_wording(text: str) -> list[str]:
    """The phrases of *text* that speak of the project's development history."""
    return [m.group(0) for pattern in HISTORY_WORDING for m in pattern.finditer(text)]


def test_the_history_wording_check_tells_the_history_from_a_kernel_session() -> None:
    # (each phrase split in two, so that this file itself passes the check)
    assert history_wording("As measured this" + " session, faster than the session" + " before.")
    assert history_wording("results w5-s" + "15-2.json")
    assert history_wording("and bench-session" + "7.json")
    assert history_wording("This fits the CI failure of stop" + " 27.")
    legitimate = (
        "Events are grouped by kernel session; a long session never runs out of budget. "
        "dill.dump_session, Event(session='s1'), the s3:// store, AWS_SESSION_TOKEN."
    )
    assert history_wording(legitimate) == []


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move reference "
        "detail into docs/"
    )
    text = "\n".join(lines)
    for needed in ("make demo", "make test", "## Architecture", "docs/performance.md"):
        assert needed in text


def test_no_tracked_file_speaks_of_development_sessions() -> None:
    files = tracked_files()
    if not files:
        pytest.skip("not a git checkout")
    found = []
    for path in files:
        name = path.relative_to(ROOT).as_posix()
        if history_wording(name.replace("/", " ")) or "session" in path.name.lower():
            found.append(f"{name}: file name")
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        found += [f"{name}: {phrase!r}" for phrase in history_wording(text)]
    assert not found, "development-history wording:\n" + "\n".join(found)


def test_performance_page_is_generated_from_the_latest_results() -> None:
    from benchmarks import performance
    from benchmarks.__main__ import ALL, PAGE, RESULTS

    page = PAGE.read_text(encoding="utf-8")
    assert page.startswith(performance.MARKER)
    chart = "img/performance.png" if (PAGE.parent / "img" / "performance.png").exists() else None
    # byte for byte what the generator makes of the committed results: `make bench` wrote it
    assert page == performance.render(performance.load(RESULTS), ALL, chart)
    for workload in ALL:
        section = page.split(f"\n## W{workload}: ", 1)[1].split("\n## ", 1)[0]
        assert "No result yet" not in section, f"W{workload} has no result"
        assert "\n|---" in section, f"W{workload} has no table"
        assert "Measured with `make bench" in section
    assert sorted(p.name for p in RESULTS.iterdir()) == sorted(f"w{w}.json" for w in ALL)
