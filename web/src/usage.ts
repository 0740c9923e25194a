// Tokens and cost per turn, from each LLM call's `data-usage` part (or the stored answers) and
// the prices in the model registry (`GET /v1/models`), as the server computes them.

import type { ModelEntry } from "./api";
import type { CallUsage } from "./history";

/** The registry entry whose id is the longest prefix of `provider:model`. */
function entry(models: ModelEntry[], usage: CallUsage): ModelEntry | undefined {
  const full = `${usage.provider}:${usage.model}`;
  return models.filter((m) => full.startsWith(m.id)).sort((a, b) => b.id.length - a.id.length)[0];
}

export interface TurnUsage {
  inputTokens: number;
  outputTokens: number;
  /** `null` when a model's price is unknown. */
  costUsd: number | null;
  models: string[];
}

export function turnUsage(calls: CallUsage[], models: ModelEntry[]): TurnUsage {
  let cost: number | null = 0;
  const total = { inputTokens: 0, outputTokens: 0 };
  const names = new Set<string>();
  for (const c of calls) {
    total.inputTokens += c.inputTokens;
    total.outputTokens += c.outputTokens;
    names.add(c.model);
    const price = entry(models, c)?.price;
    if (!price) cost = null;
    else if (cost !== null)
      cost += (c.inputTokens * price.input + c.outputTokens * price.output + c.cacheReadTokens * price.cache_read + c.cacheWriteTokens * price.cache_write) / 1e6;
  }
  return { ...total, costUsd: cost, models: [...names] };
}

export function formatUsage(u: TurnUsage): string {
  const cost = u.costUsd === null ? "cost unknown" : `$${u.costUsd.toFixed(u.costUsd < 0.01 ? 5 : 3)}`;
  return `${u.models.join(", ")} · ${u.inputTokens.toLocaleString("en")} in · ${u.outputTokens.toLocaleString("en")} out · ${cost}`;
}
