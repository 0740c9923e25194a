// This Worker's bindings with nothing behind them (benches/cold_start.mjs): started with the
// Worker's own wrangler.toml, so that what a new workerd spends starting the bindings' local
// simulators (D1, R2, the rate limiter, two Durable Object classes) is measured apart from what
// the Worker's script itself costs at startup.

import { DurableObject } from "cloudflare:workers";

export class ConversationCoordinator extends DurableObject {}
export class UserSpend extends DurableObject {}

export default {
  async fetch() {
    return new Response(null, { status: 204 });
  },
};
