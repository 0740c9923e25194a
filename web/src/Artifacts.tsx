// The conversation's artifacts beside the chat, read through `GET .../artifacts`: refetched
// whenever a `data-artifact` part in the stream names a version the panel has not shown yet.
// Markdown is rendered (sanitised), JSON pretty-printed, HTML shown in a sandboxed iframe (no
// scripts, no access to this page, no network).

import { useEffect, useState } from "react";
import type { Artifact, ArtifactSummary } from "./api";
import { conversationPath, json } from "./api";
import { Markdown } from "./markdown";

/** Put before an HTML artifact: whatever its markup asks for, it loads nothing from anywhere. */
const NO_NETWORK = `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">`;

function Content({ artifact }: { artifact: Artifact }) {
  switch (artifact.kind) {
    case "markdown":
      return <Markdown text={artifact.content} />;
    case "json": {
      let text = artifact.content;
      try {
        text = JSON.stringify(JSON.parse(text), null, 2);
      } catch {
        // shown as stored
      }
      return <pre className="json">{text}</pre>;
    }
    case "html":
      return <iframe title={artifact.title} sandbox="" srcDoc={NO_NETWORK + artifact.content} />;
    default:
      return <pre>{artifact.content}</pre>;
  }
}

/** `versions`: the newest version of each artifact the chat has seen, as `id:version` keys. */
export function ArtifactsPanel({ conversationId, versions }: { conversationId: string; versions: string }) {
  const [artifacts, setArtifacts] = useState<Artifact[]>([]);
  const [selected, setSelected] = useState<string | null>(null);
  const [problem, setProblem] = useState<string | null>(null);

  useEffect(() => {
    let cancelled = false;
    (async () => {
      const path = `${conversationPath(conversationId)}/artifacts`;
      const { artifacts: list } = await json<{ artifacts: ArtifactSummary[] }>("GET", path);
      const full = await Promise.all(list.map((a) => json<Artifact>("GET", `${path}/${encodeURIComponent(a.id)}`)));
      if (cancelled) return;
      setArtifacts(full);
      setProblem(null);
      // Follow the artifact that changed last.
      const changed = versions.split(" ").filter(Boolean).at(-1)?.split(":")[0];
      setSelected((s) => changed ?? s ?? full.at(-1)?.id ?? null);
    })().catch((e) => !cancelled && setProblem(e instanceof Error ? e.message : String(e)));
    return () => {
      cancelled = true;
    };
  }, [conversationId, versions]);

  if (artifacts.length === 0 && !problem) return null;
  const shown = artifacts.find((a) => a.id === selected) ?? artifacts.at(-1);
  return (
    <aside className="artifacts" data-testid="artifacts">
      <div className="tabs">
        {artifacts.map((a) => (
          <button key={a.id} className={a.id === shown?.id ? "tab active" : "tab"} onClick={() => setSelected(a.id)}>
            {a.title}
          </button>
        ))}
      </div>
      {problem && <div className="error">{problem}</div>}
      {shown && (
        <div className="artifact" data-testid="artifact" data-kind={shown.kind} data-version={shown.version}>
          <div className="artifact-meta">
            {shown.kind} · version {shown.version}
          </div>
          <Content artifact={shown} />
        </div>
      )}
    </aside>
  );
}

/** The `versions` key for the panel: every `data-artifact` part in the messages, in order. */
export function artifactVersions(messages: Array<{ parts: any[] }>): string {
  const latest = new Map<string, number>();
  for (const m of messages) for (const p of m.parts) {
      if (p.type !== "data-artifact") continue;
      latest.delete(p.data.id); // so the one changed last comes last
      latest.set(p.data.id, p.data.version);
    }
  return [...latest].map(([id, v]) => `${id}:${v}`).join(" ");
}
