// A connection to the V8 inspector of the user's Worker in a workerd that Miniflare started with
// an `inspectorPort`: the script Miniflare names `core:user:` (its own scripts, the local
// simulators, have targets of their own). `send(method, params)` resolves to the result of a
// Chrome DevTools Protocol call, or rejects with its error.

export async function connectInspector(inspectorPort) {
  const targets = await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json();
  const target = targets.find((t) => t.title.endsWith("core:user:"));
  if (!target) throw new Error(`no user Worker among the inspector's targets: ${targets.map((t) => t.title).join(", ")}`);
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let seq = 0;
  const pending = new Map();
  const listeners = [];
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.method) for (const listen of listeners) listen(msg);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(`${msg.error.message} (inspector)`));
      else resolve(msg.result);
    }
  };
  return {
    send: (method, params = {}) =>
      new Promise((resolve, reject) => {
        const id = ++seq;
        pending.set(id, { resolve, reject });
        ws.send(JSON.stringify({ id, method, params }));
      }),
    /** Calls `listen` with every event (a message with a `method`) that comes after. */
    onEvent: (listen) => listeners.push(listen),
    close: () => ws.close(),
  };
}
