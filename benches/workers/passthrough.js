// The baseline `make bench` compares against: a Worker that only pipes a provider's stream
// through. It forwards the request body to the Anthropic-format upstream and returns its body.
export default {
  async fetch(request, env) {
    if (request.method === "GET") return new Response("ok"); // health check
    const upstream = await fetch(`${env.ANTHROPIC_BASE_URL}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": env.ANTHROPIC_API_KEY },
      body: request.body,
    });
    return new Response(upstream.body, { status: upstream.status, headers: { "content-type": "text/event-stream" } });
  },
};
