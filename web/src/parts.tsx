// One message on screen: its text (Markdown), reasoning (collapsed), tool calls with their input
// and output (and approve/deny while a call waits for a person), notices, and the turn's usage.

import { FileThumb } from "./Composer";
import type { Message } from "./history";
import { Markdown } from "./markdown";

export interface MessageActions {
  approve(approvalId: string, approved: boolean): void;
}

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
      {part.state === "output-available" && (
        <details className="tool-io" open>
          <summary>output</summary>
          <pre data-testid="tool-output">{pretty(part.output)}</pre>
        </details>
      )}
      {part.state === "output-error" && <pre className="tool-error" data-testid="tool-output">{part.errorText}</pre>}
      {part.state === "approval-requested" && (
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
    <div className={`message ${message.role}`} data-testid={`message-${message.role}`}>
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
