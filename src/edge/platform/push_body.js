// A response body that wasm writes into (`src/edge/platform/push_body.rs`), for the turn's
// stream to its readers.
//
// A body read through a pull source (a Rust stream behind `ReadableStream`'s `pull`) costs each
// write a promise, two closures and a task's wake-up in wasm. Here the turn writes what one of
// its polls produced in one call, and the stream's own queue holds it until the runtime reads.
//
// Writes are coalesced as the earlier pull source did: a write within WINDOW_MS of the last
// enqueued one is held, with whatever else comes, until the window ends (or MAX_HELD bytes
// wait), so a burst of tokens costs one chunk per window; a write after a quieter spell (the
// `start` chunk, the first token after the model's pause, a trickle) goes out at once.

const WINDOW_MS = 4;
const MAX_HELD = 16 << 10;

// What a reader closed for falling behind reads last: a UI message stream `error` chunk, so its
// client does not take the close for the turn's end (the text of `LAGGED` in replay.rs).
const LAGGED = new TextEncoder().encode(
  'data: {"type":"error","errorText":"This reader fell more than 1 MB behind the turn\'s stream and was closed; attach to the conversation\'s stream again to follow the turn."}\n\n',
);

export class PushBody {
  /** `behind`: the most bytes the reader may leave unread of what comes after its first
   * `backlog` bytes (the turn so far, written at once); past that the body is closed. */
  constructor(behind, backlog = 0) {
    this.behind = behind;
    this.backlog = backlog;
    this.enqueued = 0;
    this.held = [];
    this.heldBytes = 0;
    this.lastAt = -Infinity;
    this.timer = undefined;
    this.gone = false;
    this.stream = new ReadableStream(
      {
        start: (controller) => {
          this.controller = controller;
        },
        cancel: () => {
          this.gone = true;
          this.clearTimer();
        },
      },
      // Counted in bytes, none wanted ahead: `desiredSize` is minus what waits unread.
      new ByteLengthQueuingStrategy({ highWaterMark: 0 }),
    );
  }

  /** Takes a copy of `bytes` (a view of wasm's memory); `false` once the reader is gone. */
  write(bytes) {
    if (this.gone) return false;
    this.held.push(bytes.slice());
    this.heldBytes += bytes.length;
    // The clock moves only on I/O: a write in the instant of the last chunk is a burst's.
    const now = Date.now();
    if (this.heldBytes >= MAX_HELD || (this.timer === undefined && now - this.lastAt >= WINDOW_MS)) {
      this.enqueue(now);
    } else if (this.timer === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.enqueue(Date.now());
      }, WINDOW_MS - (now - this.lastAt));
    }
    return !this.gone;
  }

  /** Sends what is held, then ends the stream. */
  close() {
    if (this.gone) return;
    // The end is sent whole: a reader behind at the end has the turn to read, not a lag.
    this.enqueue(Date.now(), true);
    this.gone = true;
    try {
      this.controller.close();
    } catch {}
  }

  enqueue(now, closing = false) {
    this.clearTimer();
    if (this.held.length === 0 || this.gone) return;
    let chunk = this.held[0];
    if (this.held.length > 1) {
      chunk = new Uint8Array(this.heldBytes);
      let at = 0;
      for (const piece of this.held) {
        chunk.set(piece, at);
        at += piece.length;
      }
    }
    this.held = [];
    this.heldBytes = 0;
    this.lastAt = now;
    try {
      this.controller.enqueue(chunk);
    } catch {
      this.gone = true; // cancelled or errored: the reader went away
      return;
    }
    this.enqueued += chunk.length;
    if (closing) return;
    // A reader that has left this much unread of what came after its backlog is closed: it may
    // attach again and replay. What it has read was the backlog first.
    const unread = -this.controller.desiredSize;
    const backlogLeft = Math.max(0, this.backlog - (this.enqueued - unread));
    if (unread - backlogLeft > this.behind) {
      this.gone = true;
      try {
        this.controller.enqueue(LAGGED);
        this.controller.close();
      } catch {}
    }
  }

  clearTimer() {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }
}
