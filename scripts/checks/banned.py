#!/usr/bin/env python3
"""The forms the Worker's code avoids to stay small, refused by file:line.

JSON is *read* by the crate's own reader (`crate::llm::json`: `json_struct!`, `json_enum!`,
`FromJson`), never by serde's deserializer: serde's derived readers were a fifth of the wasm, and
V8 compiles all the code a request's path runs (docs/performance.md, "a JSON reader of the
crate's own"). Writing stays serde's (`derive(Serialize)`, `serde_json::to_string`), which costs
far less. serde_wasm_bindgen is no longer compiled in: platform values are read as JSON text
(`edge::d1::rows`) or where they lie (`Reflect::get`), never through the workers-rs calls built
on it (`edge/d1/rows.rs`, `edge/d1/mod.rs`, `edge/platform/rate_limit.rs` say which).

Only the code shipped is checked: comments, strings, `#[cfg(test)]` items and test-only files are
left out (the tests compare the reader with serde_json on purpose).
"""
import re
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, str(Path(__file__).parent))
import cycles  # noqa: E402  (its parser: which files ship, their code without comments or tests)

T = r"(?:::<[^>]*>)?"  # an optional turbofish
BANNED = [
    # serde's deserializer
    (r"derive\([^)]*\bDeserialize\b", "derive(Deserialize): read with json_struct!/FromJson"),
    (r"\bDeserialize(?:Owned)?\b|\bDeserializer\b", "serde's Deserialize: read with crate::llm::json"),
    (r"serde_json::(?:\{[^}]*\b)?from_(?:str|slice|value|reader)\b", "serde_json's reader: crate::llm::json::from_str"),
    (r"\b(?:into_serde|from_serde)\b", "wasm-bindgen's serde bridge: read the text with crate::llm::json"),
    # serde_wasm_bindgen, directly or through the workers-rs calls built on it
    (r"\bserde_wasm_bindgen\b", "serde_wasm_bindgen: read JS values with Reflect, or as JSON text"),
    (rf"\.json{T}\(\s*\)", "Request/Response::json: llm::json::from_str over .text()"),
    (rf"\.first{T}\([^)]*\)\s*\??\s*\.await|\.first::<", "D1's typed first(): edge::d1::rows::first"),
    (rf"\.(?:results|raw){T}\(\s*\)", "D1's typed rows: edge::d1::rows::all / batch"),
    (r"\.meta\(\s*\)", "D1Result::meta: read meta.changes where it lies (edge::d1)"),
    (r"\.to_array\b", "SqlCursor::to_array: edge::d1::rows::cursor"),
    (r"\.limit\([^)]*\)\s*\.await", "RateLimiter::limit: edge::platform::rate_limit"),
    (r"\b(?:object_var|host_metadata)\b|\.(?:cf|props)::<", "workers-rs's serde reads: read the JS value"),
    (r"storage\(\)\s*\.get\b", "Durable Object storage's typed get: the object's SQLite and rows::cursor"),
    # Not size: std's clocks panic on wasm32-unknown-unknown; the code uses web_time's.
    (r"std::time::(?:\{[^}]*\b)?(?:Instant|SystemTime)\b", "std's clock panics on wasm: web_time"),
]


def main():
    cycles.load((), cycles.SRC / "lib.rs")
    shipped = {m.file: m.code for m in cycles.MODULES.values() if m.span[0] == 0}
    found = 0
    for file, code in sorted(shipped.items()):
        hits = sorted(
            (code.count("\n", 0, m.start()) + 1, " ".join(m.group(0).split()), why)
            for pattern, why in BANNED
            for m in re.finditer(pattern, code)
        )
        for line, text, why in hits:
            print(f"{file.relative_to(cycles.SRC.parent)}:{line}: `{text}`: {why}")
        found += len(hits)
    if found:
        print(f"{found} form(s) the Worker avoids for its size (see scripts/checks/banned.py)", file=sys.stderr)
        sys.exit(1)
    print(f"none of {len(BANNED)} banned forms in {len(shipped)} shipped files")


if __name__ == "__main__":
    main()
