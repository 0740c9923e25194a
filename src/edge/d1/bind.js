// A statement's parameters, handed over from wasm in one call (`src/edge/d1/params.rs`).
// workers-rs's `bind` takes an array that wasm builds a value at a time: each string made from
// wasm's memory and each push onto the array is a call between wasm and JavaScript. Here the
// parameters come as one byte view (read at once, before wasm runs again) and are laid out here.

const decoder = new TextDecoder();

/** Binds `packed` to `statement`: for each parameter a tag byte, then 0 for null, 1 and eight
 * bytes of a little-endian f64 for a number, or 2, a little-endian u32 length and that many
 * bytes of UTF-8 for a text. */
export function bindPacked(statement, packed) {
  const view = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
  const values = [];
  let at = 0;
  while (at < packed.length) {
    const tag = packed[at++];
    if (tag === 0) {
      values.push(null);
    } else if (tag === 1) {
      values.push(view.getFloat64(at, true));
      at += 8;
    } else {
      const length = view.getUint32(at, true);
      at += 4;
      values.push(decoder.decode(packed.subarray(at, at + length)));
      at += length;
    }
  }
  return statement.bind(...values);
}
