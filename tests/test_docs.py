"""The docs describe the repository as it is: every path the Layout table of docs/architecture.md names exists, every
`docs/rdna4.md §Section` citation names a section that exists, and no file outside tests/ cites the fact sheets
that live outside the repository or an absolute path on the machine it was written on."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Files whose text is checked for citations: the code, the kernel sources, the tools and the docs (tests may name a
# local data folder through an environment variable / default path, e.g. the perf model's calibration folder).
CHECKED = ["README.md", "build_asm.py", "docs", "sage_co", "tools", "asm_src", "benchmarks"]
TEXT_SUFFIXES = {".py", ".md", ".s", ".hip", ".toml", ".c", ".h"}
OUTSIDE = re.compile(r"rdna4_facts|launcher_facts|emulator_anchors|/work/")


def _text_files():
    for name in CHECKED:
        p = ROOT / name
        for f in ([p] if p.is_file() else sorted(p.rglob("*"))):
            if f.is_file() and f.suffix in TEXT_SUFFIXES and "__pycache__" not in f.parts:
                yield f


LAYOUT_DOC = ROOT / "docs" / "architecture.md"     # its "## Layout" table: path -> what


def _layout_table() -> str:
    return LAYOUT_DOC.read_text().split("\n## Layout", 1)[1].split("\n## ", 1)[0]


def _layout_paths() -> list[str]:
    table = _layout_table()
    paths = []
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        cell = row.split("|")[1]
        names = re.findall(r"`([^`]+)`", cell)
        base = ""
        for n in names:
            if "/" in n.rstrip("/"):
                base = n.rsplit("/", 1)[0] + "/" if not n.endswith("/") else ""
                paths.append(n)
            elif base and not (ROOT / n).exists():
                paths.append(base + n)     # `gen_sage_attention_asm.py` after `asm_src/asmdsl.py`
            else:
                paths.append(n)            # `pyproject.toml` after `.ci/run`
    return paths


def test_layout_table_paths_exist():
    paths = _layout_paths()
    assert len(paths) >= 30, paths                 # the parser found the table
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"docs/architecture.md Layout names paths that do not exist: {missing}"


def test_layout_table_lists_every_package_module():
    """Every module of sage_co/ (outside the emulator, which docs/emulator.md lists) and every subpackage of sage_co/
    and tools/ appears in the Layout table of docs/architecture.md."""
    table = _layout_table()
    wanted = [f"sage_co/{p.name}" for p in (ROOT / "sage_co").glob("*.py") if p.name != "__init__.py"]
    wanted += [f"{p.parent.name}/{p.name}/" for d in ("sage_co", "tools") for p in (ROOT / d).iterdir()
               if p.is_dir() and (p / "__init__.py").exists()]
    listed = set(_layout_paths())
    absent = [w for w in wanted if w not in listed and w.rstrip("/") not in listed
              and f"`{Path(w).name}`" not in table]
    assert not absent, f"docs/architecture.md Layout does not mention: {absent}"


def test_emulator_doc_lists_every_emu_module():
    doc = (ROOT / "docs" / "emulator.md").read_text()
    absent = [p.name for p in (ROOT / "sage_co" / "emu").glob("*.py")
              if p.name != "__init__.py" and f"`{p.name}`" not in doc]
    assert not absent, f"docs/emulator.md's module table does not mention: {absent}"


def test_rdna4_section_citations_exist():
    sections = re.findall(r"^##+ §(.+?)\s*$", (ROOT / "docs" / "rdna4.md").read_text(), re.M)
    assert "Entry" in sections and "WMMA" in sections
    bad = []
    for f in _text_files():
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for cited in re.findall(r"rdna4\.md[ ,]*§([A-Za-z][\w -]*)", line):
                if not any(cited.startswith(s) for s in sections):
                    bad.append(f"{f.relative_to(ROOT)}:{i}: §{cited}")
    assert not bad, "citations of docs/rdna4.md sections that do not exist:\n" + "\n".join(bad)


def test_nothing_cites_files_outside_the_repository():
    bad = []
    for f in _text_files():
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:120]}")
    assert not bad, "references to files outside the repository:\n" + "\n".join(bad)


# The contract docs state what is, in the present tense; history (issue numbers of the project's tracker, commit
# hashes of this repository, before/after tables) goes to CHANGELOG.md and docs/log/. A new contract doc under
# docs/ is covered by the glob; one elsewhere joins by adding its pattern here.
CONTRACT_DOCS = ("README.md", "docs/*.md")
# "issue 28", "Issue #30", "issues 12 and 24"; not the verb ("the loop issues 3.65 VALU per score")
ISSUE_REF = re.compile(r"\bissues?\s+#?\d+(?!\d|\.\d)", re.I)
# a commit hash: 7-40 lowercase hex digits with at least one digit and one letter, standing alone. A pinned revision
# of another repository keeps its `owner/repo@` prefix (`ROCm/clr@2ef9189`) and is a source, not history; hex
# constants carry `0x`.
COMMIT_HASH = re.compile(r"(?<![\w@/.#-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")


def contract_docs() -> list[Path]:
    return sorted({p for pattern in CONTRACT_DOCS for p in ROOT.glob(pattern) if p.is_file()})


def history_in(text: str) -> list[str]:
    """The issue references and commit hashes in `text`, one 'line: match' entry each."""
    found = []
    for i, line in enumerate(text.splitlines(), 1):
        found += [f"{i}: {m.group(0)}" for m in ISSUE_REF.finditer(line)]
        found += [f"{i}: {m.group(0)}" for m in COMMIT_HASH.finditer(line)]
    return found


def test_history_detector_catches_issues_and_hashes():
    assert history_in("since issue 28 the prepare is one launch") == ["1: issue 28"]
    assert history_in("Issue #30's masks\nissues 12 and 24.") == ["1: Issue #30", "2: issues 12"]
    assert history_in("the asm loop issues 3.65 plain VALU per score") == []
    assert history_in("measured at 0d327ec, before c1635f3") == ["1: 0d327ec", "1: c1635f3"]
    assert history_in("at 4d688c2a9e1f0b3c5d7e9f1a2b3c4d5e6f7a8b9c.") == ["1: 4d688c2a9e1f0b3c5d7e9f1a2b3c4d5e6f7a8b9c"]
    # not history: pinned sources of other repositories, hex constants, decimal numbers, words, sha256 digests
    assert history_in("`ROCm/clr@2ef9189`, rsrc1 0xE00F0002, 0x50019, 1234567, deadbeef, facade, "
                      "PR #4188, " + "ab12" * 16) == []


def test_contract_docs_carry_no_history():
    docs = contract_docs()
    assert ROOT / "README.md" in docs and ROOT / "docs" / "numerics.md" in docs
    assert not any("log" in p.relative_to(ROOT).parts[:-1] for p in docs)
    bad = [f"{p.relative_to(ROOT)}:{hit}" for p in docs for hit in history_in(p.read_text())]
    assert not bad, ("issue numbers / commit hashes in contract docs (history goes to CHANGELOG.md or docs/log/):\n"
                     + "\n".join(bad))


def test_tests_index_names_existing_files_and_every_test_file():
    """tests/README.md maps features to test files: every file it names exists (globs match something), and every
    test file outside tests/emu/ (indexed there as one folder) is named at least once."""
    tests = ROOT / "tests"
    index = (tests / "README.md").read_text().split("## Feature → files", 1)[1]
    named = set(re.findall(r"`([\w/*.-]+\.py)`", index))
    assert len(named) >= 30, named
    missing = [n for n in named if not list(tests.glob(n))]
    assert not missing, f"tests/README.md names files that do not exist: {missing}"
    covered = {p for n in named for p in tests.glob(n)}
    unlisted = [str(p.relative_to(tests)) for p in sorted(tests.rglob("test_*.py"))
                if p not in covered and "emu" not in p.relative_to(tests).parts]
    assert not unlisted, f"tests/README.md does not index: {unlisted}"
