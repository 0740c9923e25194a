// The playground: a page served by the Worker itself (static assets) that tries every part of
// the API through its public routes only. The shell here handles sign-in, the conversation list,
// the agent and model pickers and which conversation is open (kept in the URL's hash, so a reload comes
// back to it and re-attaches to a running turn).

import { useCallback, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import type { Agents, Conversation, ConversationState, Models } from "./api";
import { ApiError, conversationPath, json, setToken, token } from "./api";
import type { FirstMessage } from "./ChatPane";
import { ChatPane } from "./ChatPane";
import { Composer } from "./Composer";
import { MemoryPanel } from "./Memory";
import type { Message } from "./history";
import { storedView } from "./history";

interface Open {
  conversation: ConversationState;
  messages: Message[];
  firstMessage?: FirstMessage;
}

const openId = () => new URLSearchParams(location.hash.slice(1)).get("c");
const memoryOpen = () => location.hash === "#memory";

function SignIn({ onDone, failed }: { onDone(): void; failed: boolean }) {
  const [value, setValue] = useState("");
  return (
    <form
      className="signin"
      onSubmit={(e) => {
        e.preventDefault();
        setToken(value.trim());
        onDone();
      }}
    >
      <h1>edge-agent</h1>
      <p>This deployment needs a token: a JWT or an API key. It is kept for this tab only.</p>
      {failed && <p className="error">That token was not accepted.</p>}
      <input data-testid="token" type="password" autoFocus value={value} onChange={(e) => setValue(e.target.value)} placeholder="token" />
      <button type="submit">Sign in</button>
    </form>
  );
}

interface Choice {
  model: string;
  /** Named only when the deployment has more than one agent. */
  agent?: string;
}

function Draft({ models, agents, onStart }: { models: Models; agents: Agents; onStart(first: FirstMessage, choice: Choice): void }) {
  const first = agents.agents.find((a) => a.name === agents.default);
  const [agent, setAgent] = useState(agents.default);
  const [model, setModel] = useState(first?.model ?? models.default);
  const [text, setText] = useState("");
  const [files, setFiles] = useState<FirstMessage["files"]>([]);
  const ids = [...new Set([model, models.default, ...models.models.map((m) => m.id)])];
  const several = agents.agents.length > 1;
  const choose = (name: string) => {
    setAgent(name);
    const chosen = agents.agents.find((a) => a.name === name);
    if (chosen) setModel(chosen.model);
  };
  const start = () => (text.trim() || files.length > 0) && onStart({ text: text.trim(), files }, { model, agent: several ? agent : undefined });
  return (
    <section className="chat draft">
      <div className="messages">
        <div className="empty">
          {several && (
            <label>
              Agent{" "}
              <select data-testid="agent" value={agent} onChange={(e) => choose(e.target.value)}>
                {agents.agents.map((a) => (
                  <option key={a.name} value={a.name} title={a.description}>
                    {a.name}
                  </option>
                ))}
              </select>{" "}
            </label>
          )}
          <label>
            Model{" "}
            <select data-testid="model" value={model} onChange={(e) => setModel(e.target.value)}>
              {ids.map((id) => (
                <option key={id} value={id}>
                  {id}
                </option>
              ))}
            </select>
          </label>
          <p>Ask anything. Try “what time is it for me?” or “write a short plan as an artifact”.</p>
        </div>
      </div>
      <Composer value={text} onChange={setText} files={files} onFiles={setFiles} onSend={start} placeholder="Message" sendLabel="Send" />
    </section>
  );
}

function App() {
  const [auth, setAuth] = useState<"checking" | "needed" | "refused" | "ok">("checking");
  const [conversations, setConversations] = useState<Conversation[]>([]);
  const [models, setModels] = useState<Models | null>(null);
  const [agents, setAgents] = useState<Agents | null>(null);
  const [open, setOpen] = useState<Open | null>(null);
  const [hashId, setHashId] = useState(openId());
  const [showMemory, setShowMemory] = useState(memoryOpen());
  const [problem, setProblem] = useState<string | null>(null);

  const fail = useCallback((e: unknown) => {
    if (e instanceof ApiError && e.status === 401) {
      setAuth(token() ? "refused" : "needed");
      setToken(null);
    } else setProblem(e instanceof Error ? e.message : String(e));
  }, []);

  const refresh = useCallback(async () => {
    try {
      const page = await json<{ conversations: Conversation[] }>("GET", "/v1/conversations?limit=100");
      setConversations(page.conversations);
      setAuth("ok");
    } catch (e) {
      fail(e);
    }
  }, [fail]);

  useEffect(() => {
    void refresh();
  }, [refresh]);
  useEffect(() => {
    if (auth !== "ok" || models) return;
    json<Models>("GET", "/v1/models").then(setModels, fail);
    json<Agents>("GET", "/v1/agents").then(setAgents, fail);
  }, [auth, models, fail]);
  useEffect(() => {
    const onHash = () => {
      setHashId(openId());
      setShowMemory(memoryOpen());
    };
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);

  // Opens the conversation the URL names: its state, then its history.
  useEffect(() => {
    if (auth !== "ok") return;
    if (!hashId) {
      setOpen(null);
      return;
    }
    if (open?.conversation.id === hashId) return;
    let cancelled = false;
    (async () => {
      const { state: conversation, messages } = await storedView(hashId);
      if (!cancelled) setOpen({ conversation, messages });
    })().catch((e) => {
      if (e instanceof ApiError && e.status === 404) location.hash = "";
      fail(e);
    });
    return () => {
      cancelled = true;
    };
  }, [auth, hashId]);

  async function start(first: FirstMessage, { model, agent }: Choice) {
    try {
      const title = (first.text || first.files.map((f) => f.filename ?? "file").join(", ")).slice(0, 80);
      const created = await json<Conversation>("POST", "/v1/conversations", { model, title, ...(agent ? { agent } : {}) });
      setOpen({ conversation: { ...created, status: "idle" }, messages: [], firstMessage: first });
      location.hash = `c=${created.id}`;
      void refresh();
    } catch (e) {
      fail(e);
    }
  }

  async function remove(id: string) {
    try {
      await json("DELETE", conversationPath(id));
      if (open?.conversation.id === id) location.hash = "";
      await refresh();
    } catch (e) {
      fail(e);
    }
  }

  if (auth === "checking") return <div className="loading">…</div>;
  if (auth === "needed" || auth === "refused")
    return (
      <SignIn
        failed={auth === "refused"}
        onDone={() => {
          setAuth("checking");
          void refresh();
        }}
      />
    );
  return (
    <div className="app">
      <nav className="sidebar">
        <div className="brand">edge-agent</div>
        <button data-testid="new" onClick={() => (location.hash = "")}>
          New conversation
        </button>
        <ul data-testid="conversations">
          {conversations.map((c) => (
            <li key={c.id} className={c.id === hashId ? "active" : ""}>
              <a href={`#c=${c.id}`} title={c.model ?? ""}>
                {c.title || "Untitled"}
              </a>
              <button className="delete" title="Delete" data-testid="delete" onClick={() => void remove(c.id)}>
                ×
              </button>
            </li>
          ))}
        </ul>
        <button className="secondary" data-testid="open-memory" onClick={() => (location.hash = "memory")}>
          Memory
        </button>
        {token() && (
          <button
            className="secondary"
            onClick={() => {
              setToken(null);
              setAuth("needed");
            }}
          >
            Sign out
          </button>
        )}
      </nav>
      <main>
        {problem && (
          <div className="error banner" onClick={() => setProblem(null)}>
            {problem}
          </div>
        )}
        {showMemory ? (
          <MemoryPanel />
        ) : open && models ? (
          <ChatPane
            key={open.conversation.id}
            conversation={open.conversation}
            initial={open.messages}
            firstMessage={open.firstMessage}
            models={models.models}
            onActivity={() => void refresh()}
          />
        ) : !hashId && models && agents ? (
          <Draft models={models} agents={agents} onStart={(text, choice) => void start(text, choice)} />
        ) : (
          <div className="loading">…</div>
        )}
      </main>
    </div>
  );
}

const root = document.getElementById("root");
if (root) createRoot(root).render(<App />);
