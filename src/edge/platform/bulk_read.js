// Reads bodies for wasm in as few reads as the bytes' arrival allows: a provider's response
// (`pump`, for `src/edge/platform/fetch.rs`), and a request's (`bulkReader`, for `read_body` in
// `src/edge/gateway/body.rs`).
//
// A provider writes one event (a token or two) per chunk, and every read that resolves costs
// the isolate a promise turn, many times what the bytes cost (docs/performance.md). The runtime's `readAtLeast(n)` joins the chunks it has received
// until it holds n bytes. While reads find their bytes waiting (the body arrives faster than
// it is read), the next asks for twice as many, up to MAX_WANT. A read that had to wait has
// caught up with the provider: the next asks for no more than one event's bytes (SMALL_WANT, or
// the smallest read so far if the provider writes less), so whatever event comes next is read
// as it comes. A trickle is thus read event by event, and the reads of a burst that the
// provider's writes arrive in (a fast provider's body comes in many such bursts, a few
// kilobytes each) start at one event, not at one byte. What a read can hold back is bounded:
// after a burst, fewer than MAX_WANT bytes (an event or two) wait for the next ones to arrive.

const MAX_WANT = 256;
// Below every event that carries text in the formats read here (an Anthropic text delta is
// about 110 bytes with its `event:` line, an OpenAI chunk or an Ollama line more); only
// contentless ones are smaller (a 36-byte `ping`, `[DONE]` before the body ends).
const SMALL_WANT = 64;
const BUFFER_BYTES = 64 << 10;

/** A reader of `body` whose reads the runtime joins (`readAtLeast`, a workerd extension), or
 * null where there is none (another runtime, or a body that is not a byte stream). */
function joiningReader(body) {
  if (typeof ReadableStreamBYOBReader !== "function" || typeof ReadableStreamBYOBReader.prototype.readAtLeast !== "function") return null;
  try {
    return body.getReader({ mode: "byob" });
  } catch {
    return null;
  }
}

/** Resolves when `body` ends; rejects with its error, or with `write`'s (then it cancels). */
export async function pump(body, write) {
  const reader = joiningReader(body);
  if (reader === null) {
    const chunks = body.getReader();
    for (;;) {
      const { done, value } = await chunks.read();
      if (done) return;
      hand(chunks, write, value, Date.now());
    }
  }
  let buffer = new ArrayBuffer(BUFFER_BYTES);
  let want = 1;
  let small = SMALL_WANT;
  for (;;) {
    // The clock moves only when the isolate waits on I/O: an unchanged one means the bytes
    // were already there.
    const asked = Date.now();
    const { done, value } = await reader.readAtLeast(want, new Uint8Array(buffer));
    if (done) return;
    const at = Date.now();
    hand(reader, write, value, at);
    buffer = value.buffer;
    small = Math.min(small, value.length);
    want = at === asked ? Math.min(want * 2, MAX_WANT) : small;
  }
}

// `write` copies the bytes before the buffer is read into again; their length and the time they
// came come along, so that wasm need not call out to ask for them. A `write` that throws (its
// reader is gone) stops the body.
function hand(reader, write, bytes, at) {
  try {
    write(bytes, bytes.length, at);
  } catch (e) {
    reader.cancel(e).catch(() => {});
    throw e;
  }
}

// A request's body is read to its end before the request is answered, so nothing waits on a
// read that joins its chunks. The runtime hands it in chunks of 4 KB, each of which, read from
// wasm, costs a promise and a crossing: a long chat's `/v1/chat` body (all of its messages,
// 550 KB for 540,000 characters) came in 137 of them, about 11 ms of CPU. Joined natively into
// reads of BULK_BYTES, it comes in 9.
const BULK_BYTES = 64 << 10;

/** A reader of `body` in large reads: `next()` resolves to the next bytes (a view of a buffer
 * the read after reuses: copy them first), or to null at the end. `declared`, the body's
 * `content-length` (0 if it has none), sizes the buffer: a short body is read in one read
 * into a buffer of its own size. */
export function bulkReader(body, declared) {
  const reader = joiningReader(body);
  if (reader === null) {
    const chunks = body.getReader();
    return { next: async () => { const { done, value } = await chunks.read(); return done ? null : value; } };
  }
  const size = declared > 0 ? Math.min(declared, BULK_BYTES) : BULK_BYTES;
  let buffer = new ArrayBuffer(size);
  return {
    async next() {
      for (;;) {
        const { done, value } = await reader.readAtLeast(size, new Uint8Array(buffer));
        if (done) return null;
        buffer = value.buffer;
        if (value.length > 0) return value;
      }
    },
  };
}
