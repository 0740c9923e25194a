// One message on screen: its text (Markdown), reasoning (collapsed), tool calls with their input
// and output (and approve/deny while a call waits for a person), notices, and the turn's usage.

import { useEffect, useState } from "react";
import { FileThumb } from "./Composer";
import type { Message } from "./history";
import { storedView } from "./history";
import { Markdown } from "./markdown";

export interface MessageActions {
  approve(approvalId: string, approved: boolean): void;
  /** The child conversation an agent tool's call ran in, once the page knows it. */
  childOf?(toolCallId: string): string | undefined;
  /** Within a child's work: its calls are approved on the parent's message, not here. */
  nested?: boolean;
}

/** A child agent's message as an agent tool's (preliminary) output carries it. */
function childMessage(output: any): { conversation_id: string; agent?: string; status?: string; parts: any[] } | null {
  return output && typeof output === "object" && typeof output.conversation_id === "string" && Array.isArray(output.parts) ? output : null;
}

/**
 * An agent tool's child: its work as it streams in (the call's preliminary outputs), or, once
 * done (or after a reload), its stored conversation, read when opened; with a link to it.
 */
function ChildWork({ part, actions }: { part: any; actions: MessageActions }) {
  const live = childMessage(part.output);
  const childId = live?.conversation_id ?? actions.childOf?.(part.toolCallId);
  const [stored, setStored] = useState<Message[] | null>(null);
  // `null`: open while the child streams, closed once it is done, until toggled.
  const [toggled, setToggled] = useState<boolean | null>(null);
  const streaming = !!live && live.status === "streaming";
  const open = toggled ?? streaming;
  useEffect(() => {
    if (!open || streaming || !childId || stored) return;
    storedView(childId)
      .then(({ messages }) => setStored(messages))
      .catch(() => setStored([]));
  }, [open, streaming, childId, stored]);
  if (!childId) return null;
  const inner: Actions = { ...actions, nested: true };
  return (
    <div className="child-work" data-testid="child-work" data-open={open}>
      <div className="child-head">
        <button type="button" className="link" data-testid="child-toggle" onClick={() => setToggled(!open)}>
          {open ? "▾" : "▸"} {live?.agent ?? "agent"}’s work
        </button>
        <a href={`#c=${childId}`} data-testid="child-link">
          open its conversation
        </a>
      </div>
      {open &&
        (live && (streaming || !stored) ? (
          <MessageView message={{ id: `${childId}-live`, role: "assistant", parts: live.parts } as Message} actions={inner} />
        ) : (
          (stored ?? []).map((m) => <MessageView key={m.id} message={m} actions={inner} />)
        ))}
    </div>
  );
}

type Actions = MessageActions;

function pretty(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

const STATE_LABEL: Record<string, string> = {
  "input-streaming": "preparing",
  "input-available": "running",
  "approval-requested": "waiting for your approval",
  "approval-responded": "answered",
  "output-available": "done",
  "output-error": "failed",
  "output-denied": "denied",
};

function ToolCard({ part, actions }: { part: any; actions: MessageActions }) {
  const name = part.type === "dynamic-tool" ? part.toolName : part.type.slice("tool-".length);
  return (
    <div className={`tool tool-${part.state}`} data-testid="tool" data-tool={name} data-state={part.state}>
      <div className="tool-head">
        <span className="tool-name">{name}</span>
        <span className="tool-state">{STATE_LABEL[part.state] ?? part.state}</span>
      </div>
      {part.input !== undefined && (
        <details className="tool-io" open={part.state === "approval-requested"}>
          <summary>input</summary>
          <pre data-testid="tool-input">{pretty(part.input)}</pre>
        </details>
      )}
      {part.state === "output-available" && !childMessage(part.output) && part.output?.status !== "awaiting_approval" && (
        <details className="tool-io" open>
          <summary>output</summary>
          <pre data-testid="tool-output">{pretty(part.output)}</pre>
        </details>
      )}
      <ChildWork part={part} actions={actions} />
      {part.state === "output-error" && <pre className="tool-error" data-testid="tool-output">{part.errorText}</pre>}
      {part.state === "approval-requested" && !actions.nested && (
        <div className="approval">
          <button data-testid="approve" onClick={() => actions.approve(part.approval.id, true)}>
            Approve
          </button>
          <button data-testid="deny" className="secondary" onClick={() => actions.approve(part.approval.id, false)}>
            Deny
          </button>
        </div>
      )}
    </div>
  );
}

/** A typed answer: the object as it forms, then complete (or why none could be made). */
function OutputView({ state }: { state: any }) {
  const status: string = state?.status ?? "streaming";
  const shown = status === "complete" ? state.object : status === "streaming" ? state.partial : state.raw;
  return (
    <div className={`output output-${status}`} data-testid="output" data-status={status}>
      <div className="output-head">
        <span>typed answer</span>
        <span className="output-state">{status === "complete" && state.fallback ? "fallback" : status}</span>
      </div>
      {status === "error" && <div className="tool-error">{state.error?.message}</div>}
      <pre data-testid="output-object">{pretty(shown ?? "")}</pre>
    </div>
  );
}

export function MessageView({ message, actions, usage }: { message: Message; actions: MessageActions; usage?: string }) {
  return (
    <div className={`message ${message.role}`} data-testid={actions.nested ? "child-message" : `message-${message.role}`}>
      {message.parts.map((part: any, i) => {
        if (part.type === "text") {
          return message.role === "user" ? (
            <div key={i} className="user-text">
              {part.text}
            </div>
          ) : (
            <Markdown key={i} text={part.text} />
          );
        }
        if (part.type === "file") {
          return (
            <div key={i} className="message-file">
              <FileThumb part={part} />
            </div>
          );
        }
        if (part.type === "reasoning") {
          return (
            <details key={i} className="reasoning" data-testid="reasoning">
              <summary>Reasoning</summary>
              <div>{part.text}</div>
            </details>
          );
        }
        if (part.type === "dynamic-tool" || part.type.startsWith("tool-")) return <ToolCard key={i} part={part} actions={actions} />;
        if (part.type === "data-notice") {
          return (
            <div key={i} className="notice" data-testid="notice">
              {part.data.text}
            </div>
          );
        }
        if (part.type === "data-output") return <OutputView key={i} state={part.data} />;
        if (part.type === "data-artifact") {
          return (
            <div key={i} className="artifact-ref">
              artifact “{part.data.title}” v{part.data.version}
            </div>
          );
        }
        return null;
      })}
      {message.metadata?.ended === "aborted" && <div className="ended">stopped</div>}
      {usage && (
        <div className="usage" data-testid="usage">
          {usage}
        </div>
      )}
    </div>
  );
}
