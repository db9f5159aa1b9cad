"""No source file over 500 lines, and none over 400 without a one-line reason at its top.

Why: a file that keeps growing is usually two concerns; the reason line makes keeping one
long a decision someone wrote down ("Over 400 lines: ..." as a comment in the first three
lines). Generated files (migrations, the OpenAPI schema, lockfiles) are not counted.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("mlbench_master", "mlbench_worker", "tests", "scripts")
SUFFIXES = {".py", ".js", ".mjs", ".html", ".css", ".sh"}
SOFT, HARD = 400, 500
REASON = "Over 400 lines:"


def oversized(root: Path, folders: tuple[str, ...] = SOURCES) -> list[str]:
    """Each source file past the limits, with its length and what is wrong."""
    problems = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or "migrations" in path.parts or not path.is_file():
                continue
            lines = path.read_text(errors="replace").splitlines()
            name = f"{path.relative_to(root)} ({len(lines)} lines)"
            if len(lines) > HARD:
                problems.append(f"{name}: more than {HARD}; split it")
            elif len(lines) > SOFT and not any(REASON in line for line in lines[:3]):
                problems.append(f"{name}: more than {SOFT} without '{REASON} <why>' at its top")
    return problems


def test_no_source_file_is_too_long():
    problems = oversized(ROOT)
    assert not problems, "\n".join(problems)


def test_the_size_check_finds_each_kind_of_violation(tmp_path):
    src = tmp_path / "src"
    (src / "migrations").mkdir(parents=True)
    (src / "huge.py").write_text("x = 1\n" * 501)
    (src / "long.js").write_text("let x;\n" * 401)
    (src / "kept.py").write_text(f"# {REASON} one table of rules\n" + "x = 1\n" * 450)
    (src / "short.html").write_text("<p></p>\n" * 400)
    (src / "migrations" / "0001.py").write_text("x = 1\n" * 900)
    (src / "data.json").write_text("{}\n" * 900)
    assert oversized(tmp_path, ("src",)) == [
        "src/huge.py (501 lines): more than 500; split it",
        f"src/long.js (401 lines): more than 400 without '{REASON} <why>' at its top",
    ]
