// One conversation: the AI SDK's `Chat` on `POST /v1/chat` (its default body and resume URL),
// plus what the stock client has no notion of: messages typed while a turn runs go to
// `POST .../messages` and wait in the conversation's queue (steering or follow-up), Stop cancels
// the turn on the server (it outlives the page otherwise), and a turn already running when the
// page opens is re-attached through the resume URL.

import { Chat, useChat } from "@ai-sdk/react";
import type { FileUIPart } from "ai";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, lastAssistantMessageIsCompleteWithToolCalls } from "ai";
import { Fragment, useCallback, useEffect, useRef, useState } from "react";
import type { ConversationState, ModelEntry } from "./api";
import { ArtifactsPanel, artifactVersions } from "./Artifacts";
import { SchedulesList } from "./Schedules";
import { Composer } from "./Composer";
import { authHeaders, call, conversationPath, errorText } from "./api";
import type { CallUsage, Message } from "./history";
import { storedView } from "./history";
import { MessageView } from "./parts";
import { formatUsage, turnUsage } from "./usage";

/** The demo client tool: the model may ask the browser for the user's local time. */
export const CLIENT_TOOLS = [
  {
    name: "browser_time",
    description: "The user's local date, time and time zone, read from their browser. Use it for questions about the user's own time.",
    input_schema: { type: "object", properties: {} },
  },
];

function browserTime() {
  const now = new Date();
  return {
    local_time: now.toLocaleString("en-US", { dateStyle: "full", timeStyle: "long" }),
    iso: now.toISOString(),
    time_zone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    utc_offset_minutes: -now.getTimezoneOffset(),
  };
}

/** Answers a `browser_time` call; the chat sends it on once the turn's calls are answered. */
function answerClock(chat: Chat<Message>, toolCallId: string) {
  void chat.addToolOutput({ tool: "browser_time" as any, toolCallId, output: browserTime() as any });
}

interface Queued {
  key: number;
  text: string;
  queued: "steering" | "followup";
  /** `delivered`: injected into the running turn (a `data-steering` part said so). */
  state: "queued" | "delivered";
}

/** A message of another conversation that recall gave a turn. */
interface Recalled {
  conversation_id: string;
  message_id: string;
  title: string | null;
  created_at: number;
}

/** "Remembered from…": the conversations recall drew on for the latest answer. */
function RecalledFrom({ recalled }: { recalled: Recalled[] }) {
  const seen = new Map<string, Recalled>();
  for (const r of recalled) if (!seen.has(r.conversation_id)) seen.set(r.conversation_id, r);
  return (
    <div className="recalled" data-testid="recalled">
      Remembered from{" "}
      {[...seen.values()].map((r, i) => (
        <span key={r.conversation_id}>
          {i > 0 && ", "}
          <a href={`#c=${r.conversation_id}`}>{r.title || "a conversation"}</a> ({new Date(r.created_at).toLocaleDateString()})
        </span>
      ))}
    </div>
  );
}

const textOf = (m: Message) => m.parts.map((p: any) => (p.type === "text" ? p.text : "")).join("");

/** The first message of a conversation the page creates: sent once the conversation is open. */
export interface FirstMessage {
  text: string;
  files: FileUIPart[];
}

export interface ChatPaneProps {
  conversation: ConversationState;
  initial: Message[];
  /** A message to send as soon as the pane opens (the first of a new conversation). */
  firstMessage?: FirstMessage;
  models: ModelEntry[];
  onActivity(): void;
}

export function ChatPane({ conversation, initial, firstMessage, models, onActivity }: ChatPaneProps) {
  const id = conversation.id;
  const path = conversationPath(id);
  const [liveUsage, setLiveUsage] = useState<Record<string, CallUsage[]>>({});
  const [queue, setQueue] = useState<Queued[]>([]);
  const [input, setInput] = useState("");
  const [files, setFiles] = useState<FileUIPart[]>([]);
  const [delivery, setDelivery] = useState<"auto" | "steer" | "followup">("auto");
  const [problem, setProblem] = useState<string | null>(null);
  // What recall gave the latest turn (a transient `data-memory` part): shown above its answer.
  const [recalled, setRecalled] = useState<Recalled[]>([]);
  const queueRef = useRef(queue);
  queueRef.current = queue;

  const chatRef = useRef<Chat<Message> | null>(null);
  if (!chatRef.current) {
    const chat: Chat<Message> = new Chat<Message>({
      id,
      messages: initial,
      transport: new DefaultChatTransport<Message>({ api: "/v1/chat", headers: () => authHeaders(), body: () => ({ tools: CLIENT_TOOLS }) }),
      sendAutomaticallyWhen: ({ messages }) =>
        lastAssistantMessageIsCompleteWithToolCalls({ messages }) || lastAssistantMessageIsCompleteWithApprovalResponses({ messages }),
      onToolCall: ({ toolCall }) => {
        if (toolCall.toolName !== "browser_time") return; // the server runs every other tool
        // Not awaited: the chat applies it after the chunk that asked for it.
        answerClock(chat, toolCall.toolCallId);
      },
      onData: (part: any) => {
        if (part.type === "data-usage") {
          const messageId = chat.lastMessage?.role === "assistant" ? chat.lastMessage.id : null;
          if (messageId) setLiveUsage((u) => ({ ...u, [messageId]: [...(u[messageId] ?? []), part.data] }));
        } else if (part.type === "data-memory") {
          setRecalled(part.data.recalled);
        } else if (part.type === "data-steering") {
          const texts = new Set<string>(part.data.messages);
          setQueue((q) => q.map((item) => (texts.has(item.text) ? { ...item, state: "delivered" } : item)));
        }
      },
      onFinish: () => onActivity(),
    });
    chatRef.current = chat;
  }
  const chat = chatRef.current;
  const resume = conversation.status === "running";
  const { messages, status, error, sendMessage, regenerate, stop, addToolApprovalResponse, setMessages, resumeStream, clearError } = useChat<Message>({ chat, resume });
  const busy = status === "streaming" || status === "submitted";

  // The child conversations this one's agent tools ran, by the call that ran each: read when
  // the pane opens and after each turn, for the tool cards' links once the stream has ended.
  const [children, setChildren] = useState<Record<string, string>>({});
  useEffect(() => {
    if (busy) return;
    call("GET", `/v1/conversations?parent=${encodeURIComponent(id)}&limit=100`)
      .then((r) => r.json())
      .then((page) => setChildren(Object.fromEntries(page.conversations.map((c: any) => [c.tool_call_id, c.id]))))
      .catch(() => {});
  }, [id, busy]);

  // The first message of a conversation created by this page.
  const sentFirst = useRef(false);
  useEffect(() => {
    if (firstMessage && !sentFirst.current) {
      sentFirst.current = true;
      void sendMessage(firstMessage.files.length > 0 ? firstMessage : { text: firstMessage.text });
    }
  }, [firstMessage, sendMessage]);

  // A page opened on a paused turn that waits for the browser's own tool answers it now.
  useEffect(() => {
    if (conversation.status !== "awaiting_tool_results") return;
    const last = initial.at(-1);
    for (const part of (last?.parts ?? []) as any[]) {
      if (part.type === "tool-browser_time" && part.state === "input-available") {
        answerClock(chat, part.toolCallId);
      }
    }
  }, []);

  /**
   * After a turn ends with messages still queued: the history from the server (where the
   * injected messages now sit in order), then the next turn, which the queue starts, re-attached.
   * The next turn may take a moment to begin, so this looks a few times.
   */
  const settling = useRef(false);
  async function settle() {
    if (settling.current) return;
    settling.current = true;
    try {
      for (let attempt = 0; attempt < 20; attempt++) {
        const { state, messages: converted } = await storedView(id);
        const seen = new Set(converted.filter((m) => m.role === "user").map(textOf));
        const waiting = queueRef.current.filter((item) => !seen.has(item.text));
        if (state.status === "running") {
          setMessages(converted);
          setQueue(waiting);
          await resumeStream();
          return;
        }
        if (waiting.length === 0 || state.status !== "idle") {
          setMessages(converted);
          setQueue(waiting);
          return;
        }
        await new Promise((r) => setTimeout(r, 300));
      }
    } catch (e) {
      setProblem(e instanceof Error ? e.message : String(e));
    } finally {
      settling.current = false;
    }
  }

  const busyRef = useRef(busy);
  busyRef.current = busy;
  /** A schedule came due while this page's own turn ran: follow it when that turn ends. */
  const dueWaiting = useRef(false);
  /**
   * A schedule came due: its turn starts now, or when the running one ends (then this waits for
   * that end). Follow it from its start as a reload would; if it has already ended (or was
   * refused), show what is stored.
   */
  const followScheduled = useCallback(async () => {
    if (busyRef.current) {
      dueWaiting.current = true;
      return;
    }
    try {
      for (let attempt = 0; attempt < 10 && !busyRef.current; attempt++) {
        const { state, messages: converted } = await storedView(id);
        // Its turn has begun once its notice is stored: the stream is then a message after it
        // (read sooner, it would be taken for more of the last answer).
        if (state.status === "running" && converted.at(-1)?.role === "system") {
          setMessages(converted);
          await resumeStream();
          break;
        }
        await new Promise((r) => setTimeout(r, 400));
      }
      // As stored: the instruction that started the turn is in the history by now.
      if (!busyRef.current) setMessages((await storedView(id)).messages);
    } catch (e) {
      setProblem(e instanceof Error ? e.message : String(e));
    }
  }, [id, setMessages, resumeStream]);

  // A turn of this page's ended: what it queued comes next, or a schedule that came due meanwhile.
  const wasBusy = useRef(busy);
  useEffect(() => {
    if (wasBusy.current && !busy) {
      if (queueRef.current.length > 0) void settle();
      else if (dueWaiting.current) {
        dueWaiting.current = false;
        void followScheduled();
      }
    }
    wasBusy.current = busy;
  }, [busy]);

  async function submit() {
    const text = input.trim();
    const attached = files;
    if (!text && attached.length === 0) return;
    setInput("");
    setFiles([]);
    setProblem(null);
    if (!busy) {
      clearError();
      setRecalled([]);
      await sendMessage(attached.length > 0 ? { text, files: attached } : { text });
      return;
    }
    try {
      const parts = [
        ...attached.map((f) => ({ type: "file", media_type: f.mediaType, url: f.url, filename: f.filename })),
        ...(text ? [{ type: "text", text }] : []),
      ];
      const message = attached.length > 0 ? parts : text;
      const response = await call("POST", `${path}/messages`, { message, delivery, tools: CLIENT_TOOLS });
      if (response.status === 202) {
        const { queued } = await response.json();
        setQueue((q) => [...q, { key: Date.now() + Math.random(), text, queued, state: "queued" }]);
        return;
      }
      // The turn ended meanwhile and this message started the next one: attach to it.
      await response.body?.cancel();
      setMessages((m) => [...m, { id: `local-${Date.now()}`, role: "user", parts: [{ type: "text", text }] }]);
      await resumeStream();
    } catch (e) {
      setInput(text);
      setFiles(attached);
      setProblem(e instanceof Error ? e.message : String(e));
    }
  }

  async function stopTurn() {
    try {
      await call("POST", `${path}/cancel`);
    } catch {
      // 409: the turn had already ended
    }
    await stop();
    // The stored answer is marked as stopped; show it as stored.
    try {
      setMessages((await storedView(id)).messages);
    } catch (e) {
      setProblem(e instanceof Error ? e.message : String(e));
    }
    onActivity();
  }

  const scroller = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = scroller.current;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 160) el.scrollTop = el.scrollHeight;
  }, [messages]);

  const lastAssistant = messages.findLastIndex((m) => m.role === "assistant");
  const shownError = error ? errorText(error.message) : problem;

  return (
    <>
    <section className="chat" data-status={status}>
      <div className="messages" ref={scroller}>
        {messages.length === 0 && !busy && <div className="empty">Ask anything. Try “what time is it for me?” or “write a short plan as an artifact”.</div>}
        {messages.map((m, i) => {
          const calls = liveUsage[m.id] ?? m.metadata?.usage;
          return (
            <Fragment key={m.id}>
            {i === lastAssistant && recalled.length > 0 && <RecalledFrom recalled={recalled} />}
            <MessageView
              message={m}
              usage={calls?.length && !(busy && i === messages.length - 1) ? formatUsage(turnUsage(calls, models)) : undefined}
              actions={{
                approve: (approvalId, approved) => void addToolApprovalResponse({ id: approvalId, approved }),
                childOf: (callId) => children[callId],
                // A sub-agent's conversation is answered on its parent's page.
                nested: !!conversation.parent,
              }}
            />
            </Fragment>
          );
        })}
        {status === "submitted" && <div className="thinking">…</div>}
        {shownError && (
          <div className="error" data-testid="error">
            {shownError}
          </div>
        )}
        {!busy && lastAssistant >= 0 && (
          <button className="retry secondary" data-testid="retry" onClick={() => void regenerate()}>
            Retry
          </button>
        )}
      </div>
      <SchedulesList conversationId={id} refresh={`${messages.length}:${status}`} onDue={followScheduled} />
      {queue.length > 0 && (
        <ul className="queue" data-testid="queue">
          {queue.map((item) => (
            <li key={item.key} data-testid="queued" data-state={item.state}>
              <span className="badge">{item.state === "delivered" ? "sent to the model" : item.queued === "followup" ? "queued: follow-up" : "queued: steering"}</span>
              {item.text}
            </li>
          ))}
        </ul>
      )}
      {conversation.parent ? (
        <div className="notice" data-testid="child-notice">
          A sub-agent’s conversation: it answers <a href={`#c=${conversation.parent}`}>the conversation that asked it</a>, where its calls are approved.
        </div>
      ) : (
      <Composer value={input} onChange={setInput} files={files} onFiles={setFiles} onSend={() => void submit()} placeholder={busy ? "Add to the running turn…" : "Message"} sendLabel={busy ? "Queue" : "Send"}>
        {busy && (
          <select value={delivery} onChange={(e) => setDelivery(e.target.value as any)} title="When a message sent during a turn joins it">
            <option value="auto">auto</option>
            <option value="steer">steer now</option>
            <option value="followup">follow-up</option>
          </select>
        )}
        {busy && (
          <button type="button" className="danger" data-testid="stop" onClick={() => void stopTurn()}>
            Stop
          </button>
        )}
      </Composer>
      )}
    </section>
    <ArtifactsPanel conversationId={id} versions={artifactVersions(messages)} />
    </>
  );
}
