// The answer the benches have the loopback provider stream, shared so that their figures
// (`cpu.mjs`, `crossings.mjs`, `profile.mjs`) describe the same turn.

/** About 1,000 tokens: the loopback sends six characters per text delta. */
export const LONG_ANSWER = "Stream me. ".repeat(546).slice(0, 6000);

// A paced answer: PACED_TOKENS text deltas, one every PACED_GAP_MS (a fast model's pace, about
// 200 tokens a second). Every read of the body then waits for its event, so nothing is joined:
// what each event costs then is what no batching of reads can take away.
export const PACED_TOKENS = 200;
export const PACED_GAP_MS = 5;
/** The loopback's script for the paced answer (its first event written at once). */
export const PACED_ANSWER = { text: LONG_ANSWER.slice(0, 6 * PACED_TOKENS), writes: "event", burst: 1, gapMs: PACED_GAP_MS };

/** The paced answer as a typed answer: the same number of events, its text a JSON object's. */
export const TYPED_PACED_ANSWER = { ...PACED_ANSWER, text: JSON.stringify({ answer: PACED_ANSWER.text.slice(0, PACED_ANSWER.text.length - 13) }), typed: true };
/** The `output` the typed paced answer is asked with. */
export const TYPED_OUTPUT = { type: "object", schema: { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] } };

/** `n` characters of plain prose, for the messages and answers of a long conversation. */
export const filler = (n) => "lorem ipsum dolor sit amet, ".repeat(Math.ceil(n / 28)).slice(0, n);

/**
 * Gives a conversation a long history: `turns` turns, each a message and an answer (written at
 * once by `anthropic`, the loopback) of `length` characters; `send(text)` posts a message to
 * the conversation. Throws when a turn does not finish, so that no figure is taken from a
 * conversation shorter than it says.
 */
export async function fillConversation(anthropic, send, turns, length) {
  const text = filler(length);
  for (let i = 0; i < turns; i++) {
    anthropic.script({ text, writes: "one" });
    const response = await send(`${i} ${text}`.slice(0, length));
    const body = await response.text();
    if (response.status !== 200 || !body.includes('"type":"finish"')) throw new Error(`filling the conversation failed at turn ${i}: ${response.status} ${body.slice(-300)}`);
  }
}
