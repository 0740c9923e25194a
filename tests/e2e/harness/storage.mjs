// The local state a `wrangler dev` persist dir holds: its D1 databases (through `wrangler d1
// execute --local`), the conversation objects' SQLite files and the R2 bucket's.

import { readdirSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { wrangler } from "./worker.mjs";

/** Runs SQL against the local D1 in `persistDir` (as `wrangler d1 execute --local` does): the
 * `DB` binding's, or `binding`'s of `config` (a wrangler.toml). The running Worker may hold the
 * database's lock a moment (`SQLITE_BUSY`): then it tries again. */
export async function d1Query(persistDir, sql, { binding = "DB", config } = {}) {
  for (let attempt = 1; ; attempt++) {
    try {
      const out = await wrangler(["d1", "execute", binding, "--local", "--persist-to", persistDir, "--json", "--command", sql, ...(config ? ["--config", config] : [])]);
      const json = JSON.parse(out.slice(out.indexOf("[")));
      return json[0].results;
    } catch (e) {
      if (attempt >= 5 || !/SQLITE_BUSY/.test(String(e.message))) throw e;
      await sleep(200 * attempt);
    }
  }
}

/** The conversation objects' SQLite files in `persistDir`, each with the tables of ours it holds
 * (workerd's own, `_cf_…`, and the one Miniflare adds, `__miniflare_do_name`, left out) and the
 * id of the conversation it keeps, if any. Read with `node:sqlite` (Node 22.13+), read-only,
 * while `wrangler dev` may hold them open. */
export async function conversationObjects(persistDir) {
  const { DatabaseSync } = await import("node:sqlite");
  const files = readdirSync(persistDir, { recursive: true })
    .filter((f) => /ConversationCoordinator[/\\][0-9a-f]+\.sqlite$/.test(f))
    .map((f) => path.join(persistDir, f));
  return files.map((file) => {
    const db = new DatabaseSync(file, { readOnly: true });
    try {
      const tables = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_\\_miniflare%' ESCAPE '\\'")
        .all()
        .map((r) => r.name);
      const row = tables.includes("conversation") ? db.prepare("SELECT row FROM conversation").get() : undefined;
      return { file, tables, conversation: row ? JSON.parse(row.row).id : undefined };
    } finally {
      db.close();
    }
  });
}

/** The ids of the files the local R2 bucket of `persistDir` holds (from its SQLite metadata). */
export async function r2Keys(persistDir) {
  const { DatabaseSync } = await import("node:sqlite");
  const dir = path.join(persistDir, "v3", "r2", "miniflare-R2BucketObject");
  const ids = [];
  let names = [];
  try { names = readdirSync(dir).filter((n) => n.endsWith(".sqlite")); } catch {}
  for (const name of names) {
    const db = new DatabaseSync(path.join(dir, name), { readOnly: true });
    const holds = db.prepare("SELECT 1 FROM sqlite_master WHERE name = '_mf_objects'").get();
    if (holds) for (const row of db.prepare("SELECT key FROM _mf_objects").all()) ids.push(String(row.key).replace(/^files\//, ""));
    db.close();
  }
  return ids;
}
