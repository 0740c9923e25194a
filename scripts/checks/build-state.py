#!/usr/bin/env python3
"""What build/ holds, for the scripts that use a build (scripts/e2e.sh, scripts/bench.sh).

Prints one line: `missing`, or `fresh release`, `fresh debug`, `stale release (src/x.rs is
newer)`, `stale debug (…)`. Exits 0 only for `fresh release`.

- stale: a source is newer than the build (src/, including its .js glue; Cargo.toml,
  Cargo.lock, migrations/, the playground's web/ sources), so it is not what the tests would test;
- debug: the wasm carries a `name` custom section (function names). scripts/build.sh --dev
  leaves it in (worker-build --dev, no wasm-opt); a release build has it stripped into
  target/index_bg.debug.wasm, so the shipped file never has one. A debug build is about twice
  the size and unoptimised: no figure measured on it means anything.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["src", "api/openapi.json", "Cargo.toml", "Cargo.lock", "migrations", "web/src", "web/index.html", "web/style.css", "web/favicon.svg"]
BUILT = [ROOT / "build/index_bg.wasm", ROOT / "build/index.js", ROOT / "web/dist/app.js"]


def custom_sections(wasm):
    """The names of a wasm module's custom sections."""
    data, i, names = wasm.read_bytes(), 8, []

    def leb(i):
        value = shift = 0
        while True:
            byte = data[i]
            value, shift, i = value | (byte & 0x7F) << shift, shift + 7, i + 1
            if byte < 0x80:
                return value, i

    while i < len(data):
        kind = data[i]
        size, i = leb(i + 1)
        if kind == 0:
            length, j = leb(i)
            names.append(data[j : j + length].decode("utf-8", "replace"))
        i += size
    return names


def main():
    if not all(f.exists() for f in BUILT):
        print("missing")
        sys.exit(1)
    built_at = min(f.stat().st_mtime for f in BUILT)
    sources = (f for s in SOURCES for f in ([ROOT / s] if (ROOT / s).is_file() else (ROOT / s).rglob("*")))
    newer = next((f for f in sources if f.is_file() and f.stat().st_mtime > built_at), None)
    kind = "debug" if "name" in custom_sections(BUILT[0]) else "release"
    if newer:
        print(f"stale {kind} ({newer.relative_to(ROOT)} is newer)")
        sys.exit(1)
    print(f"fresh {kind}")
    sys.exit(0 if kind == "release" else 1)


if __name__ == "__main__":
    main()
