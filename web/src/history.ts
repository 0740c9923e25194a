// The conversation's stored history (`GET /v1/conversations/{id}/messages`, D1's messages) as
// the AI SDK's UI messages, shaped as the stream would have built them: one assistant message
// per turn, a `step-start` per LLM call, tool parts that carry their results.

import type { UIMessage } from "ai";
import type { ConversationState } from "./api";
import { call, conversationPath, json } from "./api";

/** What one LLM call used: the `data-usage` part's shape. */
export interface CallUsage {
  model: string;
  provider: string;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
}

export interface Meta {
  usage?: CallUsage[];
  /** How the turn's last answer ended when it did not end normally. */
  ended?: "aborted" | "error" | "interrupted";
}

export type Message = UIMessage<Meta>;

interface Stored {
  id: string;
  kind: string;
  content?: unknown;
  text?: string;
  /** A `system_event` that started a scheduled turn: the schedule. */
  schedule?: string;
  model?: string;
  provider?: string;
  stop_reason?: string;
  usage?: { input_tokens: number; output_tokens: number; cache_read_tokens?: number; cache_write_tokens?: number };
  tool_call_id?: string;
  is_error?: boolean;
  superseded?: boolean;
  /** A typed answer's end state, on the answer that gave it. */
  output?: { status: string };
}

/** The result text the server stores for a call a person denied. */
const DENIED = "denied:";

/** Every stored message, all pages. */
export async function loadHistory(id: string): Promise<Stored[]> {
  const all: Stored[] = [];
  let after = "";
  for (;;) {
    const page = await (await call("GET", `${conversationPath(id)}/messages?limit=500${after}`)).json();
    all.push(...page.messages);
    if (!page.next_cursor) return all;
    after = `&after=${encodeURIComponent(page.next_cursor)}`;
  }
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function blocks(content: unknown): Array<Record<string, any>> {
  return Array.isArray(content) ? content : typeof content === "string" ? [{ type: "text", text: content }] : [];
}

/**
 * Converts stored history. `status` decides what the last turn's open tool calls are waiting
 * for; a running turn's messages are left out, since its stream is replayed from its start.
 */
export function toUiMessages(
  stored: Stored[],
  status: ConversationState["status"],
  conversationId = "",
  waiting?: ConversationState["waiting_approval"],
): Message[] {
  let rows = stored.filter((m) => !m.superseded);
  if (status === "running") {
    const lastUser = rows.map((m) => m.kind).lastIndexOf("user");
    rows = rows.slice(0, lastUser + 1);
  }
  const out: Message[] = [];
  const openAssistant = () => {
    const last = out.at(-1);
    return last?.role === "assistant" ? last : undefined;
  };
  for (const row of rows) {
    switch (row.kind) {
      case "user": {
        // Files as the stream's file parts, served from the files route; the text after them.
        const files = blocks(row.content)
          .filter((b) => b.type === "file")
          .map((b) => ({ type: "file" as const, mediaType: b.media_type, filename: b.name, url: `${conversationPath(conversationId)}/files/${encodeURIComponent(b.id)}` }));
        const text = blocks(row.content).filter((b) => b.type === "text").map((b) => b.text).join("\n");
        out.push({ id: row.id, role: "user", parts: [...files, ...(text ? [{ type: "text" as const, text }] : [])] });
        break;
      }
      case "assistant": {
        let message = openAssistant();
        if (!message) {
          message = { id: row.id, role: "assistant", parts: [], metadata: {} };
          out.push(message);
        }
        message.parts.push({ type: "step-start" });
        // A typed turn shows its answer as the stream did: the object, not its JSON text.
        if (row.output) message.parts.push({ type: "data-output", id: `output:${message.id}`, data: row.output } as any);
        for (const b of blocks(row.content)) {
          if (b.type === "text" && b.text && row.output) continue;
          if (b.type === "text" && b.text) message.parts.push({ type: "text", text: b.text, state: "done" });
          else if (b.type === "thinking" && b.thinking) message.parts.push({ type: "reasoning", text: b.thinking, state: "done" });
          else if (b.type === "tool_use")
            message.parts.push({ type: `tool-${b.name}`, toolCallId: b.id, state: "input-available", input: b.input } as any);
        }
        const meta = (message.metadata ??= {});
        if (row.usage && row.model) {
          (meta.usage ??= []).push({
            model: row.model,
            provider: row.provider ?? "",
            inputTokens: row.usage.input_tokens,
            outputTokens: row.usage.output_tokens,
            cacheReadTokens: row.usage.cache_read_tokens ?? 0,
            cacheWriteTokens: row.usage.cache_write_tokens ?? 0,
          });
        }
        if (row.stop_reason === "aborted" || row.stop_reason === "error" || row.stop_reason === "interrupted") meta.ended = row.stop_reason;
        break;
      }
      case "tool_result": {
        const part = openAssistant()?.parts.find((p: any) => p.toolCallId === row.tool_call_id) as any;
        if (!part) break;
        const content = typeof row.content === "string" ? row.content : JSON.stringify(row.content);
        if (row.is_error && content.startsWith(DENIED)) part.state = "output-denied";
        else if (row.is_error) Object.assign(part, { state: "output-error", errorText: content });
        else Object.assign(part, { state: "output-available", output: parsed(content) });
        break;
      }
      case "context_note":
      case "system_event":
      case "summary": {
        // A schedule's instruction started the turn that follows it.
        const text = row.schedule ? `Scheduled turn: ${row.text ?? ""}` : (row.text ?? "");
        const notice = { type: "data-notice", data: { kind: row.kind, text } } as any;
        // A scheduled turn's notice starts an exchange of its own: the answer that follows it
        // (streamed into the page when it runs) is a new message, not more of the last one.
        const open = row.schedule ? undefined : openAssistant();
        if (open) open.parts.push(notice);
        else out.push({ id: row.id, role: "system", parts: [notice] });
        break;
      }
      default:
        break; // tool logs and kinds this page does not know
    }
  }
  // A paused turn: its calls without results wait for a person's decision or for the page.
  const last = openAssistant();
  if (last && status === "awaiting_approval") {
    if (!waiting?.length) {
      for (const part of last.parts as any[]) {
        if (part.toolCallId && part.state === "input-available") Object.assign(part, { state: "approval-requested", approval: { id: part.toolCallId } });
      }
    }
    for (const w of waiting ?? []) {
      const requested = { state: "approval-requested", input: w.input, approval: { id: w.tool_call_id } };
      const own = (last.parts as any[]).find((p) => p.toolCallId === w.tool_call_id);
      if (own) {
        Object.assign(own, requested);
        continue;
      }
      // A sub-agent's call (`p1/c9`): shown after the agent tool's call that waits on it, as the
      // stream showed it, that call settled so the page sends the answer on.
      const root = w.tool_call_id.split("/")[0];
      const at = (last.parts as any[]).findIndex((p) => p.toolCallId === root);
      if (at < 0) continue;
      Object.assign(last.parts[at], { state: "output-available", output: { status: "awaiting_approval" } });
      // After the agent tool's call and those of its child already placed, in the pause's order.
      let after = at + 1;
      while (after < last.parts.length && String((last.parts[after] as any).toolCallId ?? "").startsWith(`${root}/`)) after++;
      last.parts.splice(after, 0, { type: `tool-${w.tool_name}`, toolCallId: w.tool_call_id, ...requested } as any);
    }
  }
  return out;
}

/** The conversation's state and its history as the page shows it, read together. */
export async function storedView(id: string): Promise<{ state: ConversationState; messages: Message[] }> {
  const state = await json<ConversationState>("GET", conversationPath(id));
  return { state, messages: toUiMessages(await loadHistory(id), state.status, state.id, state.waiting_approval) };
}
