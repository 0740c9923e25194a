// Bench harness only (benches/d1_far.mjs copies it beside a copy of build/): this Worker with its
// D1 binding behind a wait of BENCH_D1_DELAY_MS before every call, as if D1's primary were that
// far from the Worker and the conversation's object. Nothing of it ships.
import Worker, { ConversationCoordinator as Coordinator, UserSpend as Spend } from "./index.js";

const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// workers-rs checks a binding's constructor name: these carry D1's.
class D1PreparedStatement {
  constructor(inner, ms) {
    this.inner = inner;
    this.ms = ms;
  }
  bind(...values) {
    return new D1PreparedStatement(this.inner.bind(...values), this.ms);
  }
  async first(column) {
    await wait(this.ms);
    return this.inner.first(column);
  }
  async run() {
    await wait(this.ms);
    return this.inner.run();
  }
  async all() {
    await wait(this.ms);
    return this.inner.all();
  }
  async raw(options) {
    await wait(this.ms);
    return this.inner.raw(options);
  }
}

class D1Database {
  constructor(inner, ms) {
    this.inner = inner;
    this.ms = ms;
  }
  prepare(sql) {
    return new D1PreparedStatement(this.inner.prepare(sql), this.ms);
  }
  async batch(statements) {
    await wait(this.ms);
    return this.inner.batch(statements.map((s) => s.inner));
  }
  async exec(sql) {
    await wait(this.ms);
    return this.inner.exec(sql);
  }
}

function far(env) {
  const ms = Number(env.BENCH_D1_DELAY_MS ?? 0);
  if (!(ms > 0)) return env;
  const db = new D1Database(env.DB, ms);
  return new Proxy(env, { get: (target, key) => (key === "DB" ? db : Reflect.get(target, key)) });
}

export default class extends Worker {
  constructor(ctx, env) {
    super(ctx, far(env));
  }
}

export class ConversationCoordinator extends Coordinator {
  constructor(state, env) {
    super(state, far(env));
  }
}

export class UserSpend extends Spend {
  constructor(state, env) {
    super(state, far(env));
  }
}
