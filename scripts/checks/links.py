#!/usr/bin/env python3
"""Every relative link and #anchor in the Markdown resolves: README.md, docs/*.md and any other
tracked *.md (not node_modules/, target/, .tools/).

- a link's file or folder exists (relative to the Markdown file; `/x` from the repository's root);
- an anchor into a Markdown file names one of its headings, slugged as GitHub does: the heading's
  text lower-cased, markup removed, every character but letters, digits, `-`, `_` and spaces
  dropped, spaces made `-`, the second of a slug `-1`, the third `-2`; `<a name|id="…">` counts;
- an anchor into another file, or a line's (`src/x.rs#L10`, `#L3-L9`), needs only the file:
  lines move too often to check.
Links in code blocks and code spans are not links. External links (http:, mailto:) are not checked.
Exits 1 naming file:line for each broken link.
"""
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]
SKIP = ("node_modules/", "target/", ".tools/")


def markdown_files():
    files = {ROOT / "README.md", *ROOT.glob("docs/*.md")}
    try:
        tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
        files |= {ROOT / f for f in tracked.stdout.split() if not f.startswith(SKIP)}
    except (OSError, subprocess.CalledProcessError):  # not a checkout: every *.md outside SKIP
        files |= {f for f in ROOT.rglob("*.md") if not str(f.relative_to(ROOT)).startswith(SKIP)}
    return sorted(f for f in files if f.exists())


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with code spans blanked."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s{0,3}(`{3,}|~{3,})", line)
        if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
            fence = None if fence else m.group(1)
            continue
        if fence is None:
            yield n, re.sub(r"(`+)(.+?)\1", lambda s: " " * len(s.group(0)), line)


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    keep = lambda c: c.isalnum() or c in " -_" or unicodedata.category(c).startswith("M")
    return "".join(c for c in text if keep(c)).replace(" ", "-")


ANCHORS = {}


def anchors(md):
    if md not in ANCHORS:
        seen, found = {}, set()
        text = md.read_text(encoding="utf-8")
        fence = None
        for line in text.split("\n"):
            m = re.match(r"\s{0,3}(`{3,}|~{3,})", line)
            if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
                fence = None if fence else m.group(1)
                continue
            if fence:
                continue
            found.update(re.findall(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", line))
            if (h := re.match(r"\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line)):
                base = slug(h.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        # Setext headings (a line under `===` or `---`) are not used here, so not slugged.
        ANCHORS[md] = found
    return ANCHORS[md]


def targets(line):
    """Link targets on a line: [text](target "title"), ![alt](target), [ref]: target, href="…"."""
    for m in re.finditer(r"\]\(", line):
        i, depth, j = m.end(), 1, m.end()
        while j < len(line) and depth:
            depth += {"(": 1, ")": -1}.get(line[j], 0)
            j += 1
        raw = line[i : j - 1].strip()
        raw = raw[1:].split(">", 1)[0] if raw.startswith("<") else raw.split(" ", 1)[0]
        yield raw
    if (m := re.match(r"\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)", line)):
        yield m.group(1)
    yield from re.findall(r"href=\"([^\"]+)\"", line)


def check(md):
    problems = []
    for n, line in prose_lines(md.read_text(encoding="utf-8")):
        for target in targets(line):
            if not target or re.match(r"[a-zA-Z][\w+.-]*:", target):
                continue  # empty, or external (http:, https:, mailto:)
            path, _, anchor = target.partition("#")
            path = unquote(path)
            dest = md if not path else (ROOT / path.lstrip("/") if path.startswith("/") else md.parent / path)
            where = f"{md.relative_to(ROOT)}:{n}"
            if not dest.exists():
                problems.append(f"{where}: {target}: no such file ({dest.resolve().relative_to(ROOT) if dest.resolve().is_relative_to(ROOT) else dest})")
            elif anchor and dest.suffix == ".md" and not re.fullmatch(r"L\d+(-L\d+)?", anchor) and unquote(anchor) not in anchors(dest):
                problems.append(f"{where}: {target}: no heading #{anchor} in {dest.resolve().relative_to(ROOT)}")
    return problems


def main():
    files = markdown_files()
    problems = [p for md in files for p in check(md)]
    if problems:
        print("\n".join(problems))
        print(f"{len(problems)} broken link(s) in the Markdown", file=sys.stderr)
        sys.exit(1)
    print(f"every relative link and anchor in {len(files)} Markdown files resolves")


if __name__ == "__main__":
    main()
