// Names the functions a trap's stack gives by index (`wasm-function[N]`): the shipped wasm has
// no name section, the copy `make build` keeps in target/index_bg.debug.wasm has it and the
// same indices.
//   node scripts/wasm-function.mjs 261 417 889
import { readFileSync } from "node:fs";

const path = process.env.WASM ?? new URL("../target/index_bg.debug.wasm", import.meta.url);
const wanted = process.argv.slice(2).map(Number);
if (wanted.length === 0 || wanted.some((n) => !Number.isInteger(n) || n < 0)) {
  console.error("usage: node scripts/wasm-function.mjs N [N ...]  (N from wasm-function[N])");
  process.exit(2);
}
// Read the sections by hand: compiling the module would need the runtime's wasm features.
const bytes = readFileSync(path);
let at = 8; // magic and version
const leb = () => {
  let value = 0;
  for (let shift = 0; ; shift += 7) {
    const byte = bytes[at++];
    value += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) return value;
  }
};
const text = (length) => bytes.toString("utf8", at, (at += length));
let section = null;
while (at < bytes.length && !section) {
  const id = bytes[at++];
  const end = leb() + at;
  if (id === 0 && text(leb()) === "name") section = end;
  else at = end;
}
if (!section) {
  console.error(`${path} has no name section: run \`make build\` first`);
  process.exit(1);
}

// The name section's subsections (id, size, body); subsection 1 maps function indices to names.
const names = new Map();
while (at < section) {
  const id = bytes[at++];
  const end = leb() + at;
  if (id === 1) {
    for (let count = leb(); count > 0; count--) {
      const index = leb();
      names.set(index, text(leb()));
    }
  }
  at = end;
}
for (const n of wanted) console.log(`wasm-function[${n}]  ${names.get(n) ?? "(no such function)"}`);
