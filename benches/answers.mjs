// The answer the benches have the loopback provider stream, shared so that their figures
// (`cpu.mjs`, `crossings.mjs`, `profile.mjs`) describe the same turn.

/** About 1,000 tokens: the loopback sends six characters per text delta. */
export const LONG_ANSWER = "Stream me. ".repeat(546).slice(0, 6000);
