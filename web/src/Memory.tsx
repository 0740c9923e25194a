// What the agents remember of the signed-in user (`GET /v1/me/memory`), theirs to read, edit
// and clear: each agent that keeps memory, its document in a text box (a JSON object for an
// agent whose memory has a schema, else Markdown), saved whole with `PUT .../{agent}` and
// cleared with `DELETE .../{agent}`. Opened at `#memory`.

import { useCallback, useEffect, useState } from "react";
import { json } from "./api";

export interface MemoryEntry {
  agent: string;
  memory: unknown;
  kind: "schema" | "text";
  managed_by: "tool" | "background" | null;
  version: number;
  updated_at: number | null;
}

const shown = (m: MemoryEntry) => (m.kind === "schema" ? JSON.stringify(m.memory, null, 2) : String(m.memory ?? ""));
const memoryPath = (agent: string) => `/v1/me/memory/${encodeURIComponent(agent)}`;

function Entry({ entry, onChanged }: { entry: MemoryEntry; onChanged(): void }) {
  const [text, setText] = useState(shown(entry));
  const [problem, setProblem] = useState<string | null>(null);
  useEffect(() => setText(shown(entry)), [entry]);

  async function act(work: () => Promise<unknown>) {
    try {
      await work();
      setProblem(null);
      onChanged();
    } catch (e) {
      setProblem(e instanceof Error ? e.message : String(e));
    }
  }
  const save = () =>
    act(async () => {
      let memory: unknown = text;
      if (entry.kind === "schema") {
        try {
          memory = JSON.parse(text);
        } catch {
          throw new Error("this memory is a JSON object: it does not read as JSON");
        }
      }
      await json("PUT", memoryPath(entry.agent), { memory });
    });
  const when = entry.updated_at ? `updated ${new Date(entry.updated_at).toLocaleString()}` : "nothing kept yet";
  return (
    <li className="memory-entry" data-testid="memory-entry" data-agent={entry.agent} data-version={entry.version}>
      <h3>
        {entry.agent} <span className="badge">{entry.managed_by === "background" ? "kept after each answer" : "kept by the agent"}</span>{" "}
        <span className="badge">{when}</span>
      </h3>
      <textarea data-testid="memory-text" value={text} rows={Math.min(16, Math.max(4, text.split("\n").length + 1))} onChange={(e) => setText(e.target.value)} />
      {problem && <div className="error">{problem}</div>}
      <div className="actions">
        <button type="button" data-testid="memory-save" disabled={text === shown(entry)} onClick={() => void save()}>
          Save
        </button>
        <button type="button" className="danger" data-testid="memory-clear" disabled={entry.updated_at === null} onClick={() => void act(() => json("DELETE", memoryPath(entry.agent)))}>
          Clear
        </button>
      </div>
    </li>
  );
}

export function MemoryPanel() {
  const [entries, setEntries] = useState<MemoryEntry[] | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const load = useCallback(() => {
    json<{ memory: MemoryEntry[] }>("GET", "/v1/me/memory").then(
      (r) => {
        setEntries(r.memory);
        setProblem(null);
      },
      (e) => setProblem(e instanceof Error ? e.message : String(e)),
    );
  }, []);
  useEffect(load, [load]);
  return (
    <section className="memory" data-testid="memory-panel">
      <h2>Memory</h2>
      <p>What the agents remember about you across conversations. A conversation started with memory off is neither remembered nor recalled.</p>
      {problem && <div className="error">{problem}</div>}
      {entries?.length === 0 && <p className="empty">No agent of this deployment keeps memory.</p>}
      <ul>
        {entries?.map((e) => (
          <Entry key={e.agent} entry={e} onChanged={load} />
        ))}
      </ul>
    </section>
  );
}
