// Bench harness only (benches/flush.mjs copies it beside a copy of build/, and runs workerd with
// V8's --allow-natives-syntax): this Worker, whose `fetch` first has V8 drop the baseline
// (Liftoff) code of every wasm module in the process when the request carries
// `x-bench-flush`, as V8 does each time workerd creates an isolate in the process (any
// Worker's). Nothing of it ships.
import Worker, { ConversationCoordinator, UserSpend } from "./index.js";

export { ConversationCoordinator, UserSpend };

export default class extends Worker {
  fetch(request) {
    if (request.headers.has("x-bench-flush")) %FlushLiftoffCode();
    return super.fetch(request);
  }
}
