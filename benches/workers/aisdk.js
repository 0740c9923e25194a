// The TypeScript stack `make bench` compares against: the AI SDK's `streamText` with its
// Anthropic provider, answering the `useChat` body with `toUIMessageStreamResponse()`, as its
// documentation shows for a Worker. Bundled by wrangler from the project's node_modules.
import { createAnthropic } from "@ai-sdk/anthropic";
import { convertToModelMessages, streamText } from "ai7";

export default {
  async fetch(request, env) {
    if (request.method === "GET") return new Response("ok"); // health check
    const { messages } = await request.json();
    const anthropic = createAnthropic({ baseURL: `${env.ANTHROPIC_BASE_URL}/v1`, apiKey: env.ANTHROPIC_API_KEY });
    const result = streamText({ model: anthropic("claude-sonnet-4-5"), messages: await convertToModelMessages(messages) });
    return result.toUIMessageStreamResponse();
  },
};
