// Rows whose text is itself JSON, handed to wasm as one UTF-8 document (`src/edge/rows.rs`).
// The document is put together here, where each row's text is already a string, and encoded by
// the runtime straight into wasm's memory: wasm-bindgen's glue copies a string into wasm one
// character at a time in JavaScript, and quoting the texts inside the rows' JSON would escape
// each one. The long texts are encoded one by one rather than joined first: joining made one
// string of them all, which the encoder then copied flat (about a millisecond at 540,000
// characters, much of it the kernel clearing pages for the copy).

const encoder = new TextEncoder();
// Texts shorter than this are joined with the JSON around them; longer ones are encoded alone.
const ALONE = 4096;
// The document `embed` measured, waiting for `embedInto`: the two are called one right after the
// other, with nothing in between.
let pending = [];

/** Lays out `rows` as a JSON array, each row's `column` embedded as it is (null stays null),
 * and returns how many bytes of UTF-8 it can take at most, for `embedInto`. */
export function embed(rows, column) {
  const key = JSON.stringify(column);
  const pieces = [];
  let joined = "[";
  let units = 0;
  for (let i = 0; i < rows.length; i++) {
    const { [column]: value, ...rest } = rows[i];
    const text = value == null ? "null" : String(value);
    const fields = JSON.stringify(rest);
    joined += `${i ? "," : ""}${fields.length > 2 ? `${fields.slice(0, -1)},` : "{"}${key}:`;
    if (text.length < ALONE) {
      joined += `${text}}`;
    } else {
      pieces.push(joined, text);
      units += joined.length + text.length;
      joined = "}";
    }
  }
  joined += "]";
  pieces.push(joined);
  units += joined.length;
  pending = pieces;
  // A UTF-16 unit takes at most three bytes of UTF-8 (a pair of them, four).
  return units * 3;
}

/** Writes the document `embed` laid out into `out` (a view of wasm's memory at least as long
 * as `embed` said) and returns how many bytes it took. */
export function embedInto(out) {
  let written = 0;
  for (const piece of pending) written += encoder.encodeInto(piece, out.subarray(written)).written;
  pending = [];
  return written;
}
