// A long string's UTF-8 bytes for wasm (`src/edge/rows.rs`), encoded by the runtime in one native
// call. wasm-bindgen's glue copies a string into wasm one character at a time in JavaScript,
// which for a long history document was the largest part of handing it over.

const encoder = new TextEncoder();

/** `text` as UTF-8. */
export function utf8(text) {
  return encoder.encode(text);
}
