// Rows whose text is itself JSON, handed to wasm as one UTF-8 document (`src/edge/rows.rs`).
// The document is put together here, where each row's text is already a string, and encoded by
// the runtime in one native call: wasm-bindgen's glue copies a string into wasm one character
// at a time in JavaScript, and quoting the texts inside the rows' JSON would escape each one.

const encoder = new TextEncoder();

/** `rows` as a JSON array, each row's `column` embedded as it is (null stays null), as UTF-8. */
export function embed(rows, column) {
  const key = JSON.stringify(column);
  let document = "[";
  for (let i = 0; i < rows.length; i++) {
    const { [column]: text, ...rest } = rows[i];
    const fields = JSON.stringify(rest);
    document += `${i ? "," : ""}${fields.length > 2 ? `${fields.slice(0, -1)},` : "{"}${key}:${text ?? null}}`;
  }
  return encoder.encode(`${document}]`);
}
