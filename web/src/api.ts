// The playground's only way to the server: the public HTTP API, with the caller's token if the
// deployment wants one. The token lives in sessionStorage (this tab only) and is sent as a
// bearer token; the page holds no secret of the server's.

const TOKEN_KEY = "edge-agent-token";

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value: string | null) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function authHeaders(): Record<string, string> {
  const t = token();
  return t ? { authorization: `Bearer ${t}` } : {};
}

/** An API error as the user should read it: the server's message (which names the request). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The readable part of an error body (`{error: {code, message}}`), else a short generic text. */
export function errorText(body: string, status?: number): string {
  try {
    const parsed = JSON.parse(body);
    if (typeof parsed?.error?.message === "string") return parsed.error.message;
  } catch {
    // not JSON: fall through
  }
  return status ? `the server answered ${status}` : body.slice(0, 300);
}

export async function call(method: string, path: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = { ...authHeaders() };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!response.ok) throw new ApiError(response.status, errorText(await response.text(), response.status));
  return response;
}

export async function json<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await call(method, path, body);
  return response.status === 204 ? (undefined as T) : ((await response.json()) as T);
}

export interface Conversation {
  id: string;
  title?: string | null;
  model?: string | null;
  created_at: number;
  updated_at: number;
}

export interface ConversationState extends Conversation {
  status: "idle" | "running" | "awaiting_tool_results" | "awaiting_approval";
  /** A sub-agent's conversation: the one whose agent tool asks it (it takes nothing from the page). */
  parent?: string;
  /** The calls a paused turn waits to have approved, a sub-agent's (`p1/c9`) among them. */
  waiting_approval?: { tool_call_id: string; tool_name: string; input: unknown }[];
}

export interface ModelEntry {
  id: string;
  price?: { input: number; output: number; cache_read: number; cache_write: number } | null;
}

export interface Models {
  default: string;
  models: ModelEntry[];
}

/** One of the deployment's agents (`GET /v1/agents`). */
export interface AgentEntry {
  name: string;
  description: string;
  model: string;
}

export interface Agents {
  default: string;
  agents: AgentEntry[];
}

export interface ArtifactSummary {
  id: string;
  title: string;
  kind: string;
  version: number;
}

export interface Artifact extends ArtifactSummary {
  content: string;
}

export interface Schedule {
  id: string;
  instruction: string;
  at?: number;
  cron?: string;
  status: "active" | "paused" | "done";
  running: boolean;
  next_run_at: number | null;
  last_run_at: number | null;
  last_outcome: string | null;
  last_error?: string;
  runs: number;
  failures: number;
}

export const conversationPath = (id: string) => `/v1/conversations/${encodeURIComponent(id)}`;
