// `scripts/wasm-function.mjs`: a trap's stack in the shipped Worker names functions only by index
// (`wasm-function[N]`; the shipped wasm has no name section), and the script names them from the
// debug copy `make build` keeps. Checked against the shipped wasm's own exports: the index the
// shipped module gives its `fetch` export must name that function in the debug copy.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { ROOT } from "./harness.mjs";

const SCRIPT = path.join(ROOT, "scripts/wasm-function.mjs");
const SHIPPED = path.join(ROOT, "build/index_bg.wasm");

/** The function index of each function export of a wasm module. */
function functionExports(bytes) {
  let at = 8;
  const leb = () => {
    let value = 0;
    for (let shift = 0; ; shift += 7) {
      const byte = bytes[at++];
      value += (byte & 0x7f) * 2 ** shift;
      if (byte < 0x80) return value;
    }
  };
  const exports = new Map();
  while (at < bytes.length) {
    const id = bytes[at++];
    const end = leb() + at;
    if (id === 7) {
      for (let count = leb(); count > 0; count--) {
        const length = leb();
        const name = bytes.toString("utf8", at, (at += length));
        const kind = bytes[at++];
        const index = leb();
        if (kind === 0) exports.set(name, index);
      }
    }
    at = end;
  }
  return exports;
}

test("a trap's wasm-function[N] is named from the debug copy, with the shipped wasm's indices", () => {
  const exports = functionExports(fs.readFileSync(SHIPPED));
  const fetch = exports.get("fetch");
  assert.ok(Number.isInteger(fetch), `the shipped wasm exports fetch: ${[...exports.keys()].join(", ")}`);
  const out = execFileSync(process.execPath, [SCRIPT, String(fetch), "99999999"], { encoding: "utf8" });
  const [named, missing] = out.trim().split("\n");
  assert.match(named, new RegExp(`^wasm-function\\[${fetch}\\]  .*fetch`));
  assert.equal(missing, "wasm-function[99999999]  (no such function)");
});

test("the shipped wasm has no names to give, and bad arguments are refused", () => {
  const shipped = spawnSync(process.execPath, [SCRIPT, "1"], { encoding: "utf8", env: { ...process.env, WASM: SHIPPED } });
  assert.equal(shipped.status, 1);
  assert.match(shipped.stderr, /has no name section/);
  const bad = spawnSync(process.execPath, [SCRIPT, "fetch"], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /usage/);
});
