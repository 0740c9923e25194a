#!/usr/bin/env python3
"""No import circles between files: every strongly connected component of src/'s file graph.

A file (a module: `src/x.rs` or `src/x/mod.rs`) depends on another when its code names an item
the other defines. The edges come from `use` declarations and from paths written in code
(`crate::a::b::Item`, `super::x`, `self::x`, `super::super::x`, `$crate::…` in a macro, a path
through a name a `use` bound, such as `d1::files::X` after `use crate::edge::d1`, or through a child
module). A path is resolved module by module to the file that *defines* the item it names:
  - `crate::agent::compact::estimate_tokens` → src/agent/compact.rs;
  - an item a mod.rs re-exports (`pub use event::AgentEvent`) is followed to the file defining it
    (src/agent/event.rs): a re-export is a doorway, and the real dependency is behind it. An item
    a mod.rs defines itself, or one this script cannot find (a glob, a macro's output), counts as
    an edge to that mod.rs, and so does a glob (`use super::*`);
  - `#[macro_export]` macros (`crate::json_struct!`) resolve to the file defining them.
Not edges (they would make every parent a circle with its children):
  - `mod x;` declarations, and a `use` of a module's own name (`use crate::edge::d1;`): the
    paths through it in code (`d1::files::X`) are the edges;
  - a `pub use` (any `pub(…)`) of the file's own descendants, unless the re-exported name is also
    used by the file's own code. A child importing its parent's items and the parent *using* the
    child's items in its code is a circle; the parent merely re-exporting them is not.
Left out as test-only: every item under `#[cfg(test)]` (`mod tests { … }`, a `use`, a helper), and
files reached only through `#[cfg(test)] mod x;` (the `*_tests.rs` files, `tests.rs`, `testing.rs`).
Comments (so doc links) and string literals are ignored. `#[path]` is not supported (none used).
Usage: cycles.py [-v] [SRC]; `-v` prints every edge with the line that makes it. Exits 1 when
there is a circle.
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
IDENT = r"[A-Za-z_]\w*"


def strip(src):
    """Comments, strings and char literals to spaces; newlines kept so line numbers hold."""
    out, i, n = [], 0, len(src)
    blank = lambda s: re.sub(r"[^\n]", " ", s)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
        elif (m := re.match(r'b?r(#*)"', src[i:])) and (i == 0 or not re.match(r"\w", src[i - 1])):
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
        elif c == '"' or (c == "b" and src.startswith('b"', i) and not re.match(r"\w", src[i - 1])):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
        elif c == "'" and (m := re.match(r"'(\\(x..|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", src[i:], re.S)):
            j = i + m.end()
        else:
            out.append(c)
            i += 1
            continue
        out.append(blank(src[i:j]))
        i = j
    return "".join(out)


def match_close(code, i):
    """Index just past the bracket that closes the one at i."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] in "([{":
            depth += 1
        elif code[j] in ")]}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def item_end(code, i):
    """End of the item starting at i: its `;`, its body's closing brace, or (a field, an arm)
    the `,` or `}` that ends it."""
    while (m := re.compile(r"\s*#\[").match(code, i)):  # further attributes
        i = match_close(code, m.end() - 1)
    j = i
    while j < len(code):
        if code[j] in "([":
            j = match_close(code, j)
        elif code[j] in ";,":
            return j + 1
        elif code[j] == "{":
            return match_close(code, j)
        elif code[j] == "}":
            return j
        else:
            j += 1
    return j


def drop_test_items(code):
    """Blank every item under `#[cfg(test)]`."""
    while (m := re.search(r"#\[cfg\(test\)\]", code)):
        end = item_end(code, m.end())
        code = code[: m.start()] + re.sub(r"[^\n]", " ", code[m.start():end]) + code[end:]
    return code


def parse_use_tree(text):
    """`a::{b, c::d as e, f::*}` → [(["a","b"], "b"), (["a","c","d"], "e"), (["a","f"], "*")]."""
    toks = re.findall(r"\$?\w+|::|[{},*]", text)
    out, pos = [], [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def tree(prefix):
        segs = list(prefix)
        while True:
            t = peek()
            pos[0] += 1
            if t == "{":
                while peek() not in ("}", None):
                    tree(segs)
                    if peek() == ",":
                        pos[0] += 1
                pos[0] += 1
                return
            if t == "*":
                out.append((segs, "*"))
                return
            segs.append(t)
            if peek() == "::":
                pos[0] += 1
                continue
            alias = None
            if peek() == "as":
                alias = toks[pos[0] + 1]
                pos[0] += 2
            if segs[-1] == "self":
                segs.pop()
            if segs:
                out.append((segs, alias or segs[-1]))
            return

    while peek() is not None:
        tree([])
        if peek() == ",":
            pos[0] += 1
    return out


class Module:
    def __init__(self, path, file, code, span):
        self.path, self.file, self.code, self.span = path, file, code, span
        self.children = {}  # name → Module (files and inline `mod x { }`)
        self.inline = []  # spans of inline children, excluded from this module's own text
        self.uses = []  # (segments, bound name, is_pub, line)
        self.defs = set()
        self.refs = []  # (segments, line) written in code

    def own_text(self):
        """This module's code with the inline child modules blanked."""
        a, b = self.span
        text = self.code[a:b]
        for s, e in self.inline:
            text = text[: s - a] + re.sub(r"[^\n]", " ", text[s - a : e - a]) + text[e - a :]
        return text

    def line(self, offset):
        return self.code.count("\n", 0, self.span[0] + offset) + 1


MODULES = {}  # path tuple → Module
MACROS = {}  # #[macro_export] name → the module defining it
SKIPPED = []  # test-only files


def load(path, file):
    raw = file.read_text()
    if re.search(r"#!\[cfg\(test\)\]", strip(raw)):
        SKIPPED.append(file)
        return
    code = drop_test_items(strip(raw))
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", strip(raw)):
        SKIPPED.extend(submodule_file(file, m.group(1)))
    add_module(path, file, code, (0, len(code)))


def submodule_file(file, name):
    base = file.parent if file.name in ("lib.rs", "mod.rs") else file.with_suffix("")
    return [f for f in (base / f"{name}.rs", base / name / "mod.rs") if f.exists()][:1]


def add_module(path, file, code, span):
    mod = MODULES[path] = Module(path, file, code, span)
    a, b = span
    i = a
    # Children: `mod x;` (a file) and `mod x { … }` (inline; its own scope, same file).
    for m in re.finditer(r"\bmod\s+(\w+)\s*([;{])", code[a:b]):
        start = a + m.start()
        if start < i:
            continue  # inside an inline child already handled
        name = m.group(1)
        if m.group(2) == ";":
            for f in submodule_file(file, name):
                load(path + (name,), f)
                mod.children[name] = MODULES.get(path + (name,))
            i = a + m.end()
        else:
            open_ = a + m.end() - 1
            close = match_close(code, open_)
            mod.inline.append((start, close))
            mod.children[name] = add_module(path + (name,), file, code, (open_ + 1, close - 1))
            i = close
    mod.children = {k: v for k, v in mod.children.items() if v}
    text = mod.own_text()
    for m in re.finditer(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);", text):
        for segs, bound in parse_use_tree(m.group(2)):
            mod.uses.append((segs, bound, bool(m.group(1)), mod.line(m.start(2))))
    for m in re.finditer(rf"\b(?:fn|struct|enum|trait|type|union)\s+({IDENT})|\b(?:const|static)\s+(?!fn\b)(?:mut\s+)?({IDENT})", text):
        mod.defs.add(m.group(1) or m.group(2))
    for m in re.finditer(rf"(#\[macro_export\]\s*)?macro_rules!\s*({IDENT})", text):
        mod.defs.add(m.group(2))
        if m.group(1):
            MACROS[m.group(2)] = mod
    # Paths in code: everything but the `use` and `mod` lines.
    code_only = re.sub(r"\b(pub(?:\s*\([^)]*\))?\s+)?(use\s+[^;]*|mod\s+\w+\s*);", lambda x: re.sub(r"[^\n]", " ", x.group(0)), text)
    mod.code_only = code_only
    for m in re.finditer(rf"(?<![\w:$])(\$crate|{IDENT})((?:\s*::\s*{IDENT})+)", code_only):
        segs = [m.group(1)] + re.findall(IDENT, m.group(2))
        mod.refs.append((segs, mod.line(m.start())))
    return mod


def bindings(mod, name):
    """The `use` declarations in mod that bind name; not `use async_trait::async_trait`, whose
    path starts at the crate of that name, not at the binding (`pub use prepare::prepare` starts
    at the child module)."""
    return [u for u in mod.uses if u[1] == name and (u[0][0] != name or name in mod.children)]


def resolve(mod, segs, seen=None, module=False):
    """The modules defining what a path written in `mod` names: empty for other crates' paths.
    With module=True, only a path naming a module itself resolves (`use crate::edge::d1`)."""
    seen = set() if seen is None else seen
    if (mod.path, tuple(segs), module) in seen:
        return set()
    seen.add((mod.path, tuple(segs), module))
    first, rest = segs[0], segs[1:]
    if first in ("crate", "$crate"):
        return walk(MODULES[()], rest, seen, module)
    if first == "self":
        return walk(mod, rest, seen, module)
    if first == "super":
        return resolve(MODULES[mod.path[:-1]], ["self"] + rest, seen, module) if mod.path else set()
    if first in mod.children or first in mod.defs or bindings(mod, first):
        return walk(mod, segs, seen, module)
    return set()  # another crate's path (std::, serde_json::, worker::)


def walk(mod, segs, seen, module=False, strict=False):
    """Descend child modules; at an item, follow `use` bindings (re-exports) to the module
    defining it. An item not found: the module itself (nothing when strict: a glob's guess)."""
    if not segs:
        return {mod}
    name, rest = segs[0], segs[1:]
    if name == "super":
        return resolve(mod, segs, seen, module)
    bound = bindings(mod, name)
    if name in mod.children:
        if not rest and (bound or name in mod.defs):  # `mod prepare;` and `pub use prepare::prepare;`
            if module:
                return set()
            items = set().union(*(resolve(mod, u[0], seen) for u in bound)) if bound else {mod}
            return {mod.children[name]} | items
        return walk(mod.children[name], rest, seen, module, strict)
    if bound:
        return set().union(*(resolve(mod, u[0] + rest, seen, module) for u in bound))
    if module:
        return set()
    if name in mod.defs:
        return {mod}
    if not mod.path and name in MACROS:
        return {MACROS[name]}
    for u in (u for u in mod.uses if u[1] == "*"):  # glob imports (`use super::*`)
        for target in resolve(mod, u[0], set()):
            if (found := walk(target, segs, seen, strict=True)):
                return found
    return set() if strict else {mod}


def is_descendant(mod, segs):
    """Does a `use` path in mod name one of mod's own descendants?"""
    if segs[0] == "self":
        segs = segs[1:]
    elif segs[0] == "crate":
        return tuple(segs[1 : len(mod.path) + 1]) == mod.path and len(segs) > len(mod.path) + 1
    return bool(segs) and segs[0] in mod.children


def graph():
    edges = {}  # (from, to) → first evidence line

    def add(src, targets, line, what):
        for t in targets:
            if t.file != src.file:
                edges.setdefault((src.file, t.file), (line, what))

    for mod in MODULES.values():
        for segs, bound, is_pub, line in mod.uses:
            if is_pub and is_descendant(mod, segs) and not (
                bound != "*" and re.search(rf"(?<![\w.:]){re.escape(bound)}\b", mod.code_only)
            ):
                continue  # a parent re-exporting its children
            if bound != "*" and resolve(mod, segs, module=True):
                continue  # a module's name (`use crate::edge::d1`): its paths in code are the edges
            add(mod, resolve(mod, segs), line, "::".join(segs))
        for segs, line in mod.refs:
            add(mod, resolve(mod, segs), line, "::".join(segs))
    return edges


def sccs(nodes, succ):
    """Tarjan's algorithm, iterative."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ.get(root, ())))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(succ.get(w, ()))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def shortest_cycle(start, succ, members):
    """The shortest chain start → … → start inside the component (breadth first)."""
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ.get(v, ())):
                if w == start:
                    chain = [v]
                    while prev[chain[-1]] is not None:
                        chain.append(prev[chain[-1]])
                    return chain[::-1] + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def main():
    global SRC
    SRC = Path(next((a for a in sys.argv[1:] if not a.startswith("-")), SRC)).resolve()
    load((), SRC / "lib.rs")
    edges = graph()
    rel = lambda f: str(f.relative_to(SRC))
    succ = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
    if "-v" in sys.argv:
        for (a, b), (line, what) in sorted(edges.items()):
            print(f"{rel(a)}:{line} → {rel(b)}  ({what})")
    comps = [sorted(c) for c in sccs(sorted({m.file for m in MODULES.values()}), succ) if len(c) > 1]
    for n, comp in enumerate(sorted(comps, key=lambda c: rel(c[0])), 1):
        members = set(comp)
        print(f"circle {n}: {len(comp)} files: {', '.join(rel(f) for f in comp)}")
        covered = set()
        for f in comp:
            if f in covered:
                continue
            chain = shortest_cycle(f, succ, members)
            covered.update(chain)
            print("  " + " → ".join(rel(x) for x in chain))
        for (a, b), (line, what) in sorted(edges.items()):
            if a in members and b in members:
                print(f"    {rel(a)}:{line} uses {rel(b)}  ({what})")
    if comps:
        print(f"{len(comps)} import circle(s) between files; break each by moving the shared items "
              "down into a file both sides import", file=sys.stderr)
        sys.exit(1)
    print(f"no import circles among {len({m.file for m in MODULES.values()})} files")


if __name__ == "__main__":
    main()
