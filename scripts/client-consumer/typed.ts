// Typechecked by scripts/test-client-package.mjs in the consumer project against the installed
// package's .d.ts (no skipLibCheck), under DOM and Node typings and node10 / bundler / nodenext
// module resolution: a consumer's editor and tsc see these types.
import { FloodgateClient, FloodgateError, type Message, type PublishResult, RateLimitedError } from "@floodgate/client";

export async function typed(base: string, accessToken: string): Promise<number> {
  const fg = new FloodgateClient({ baseUrl: base, accessToken, onTokens: (pair) => pair.refresh_token.length });
  let r: PublishResult;
  try {
    r = await fg.publish("public:live.reactions", { emoji: "🔥" }, { idempotencyKey: "order-42" });
  } catch (e) {
    if (e instanceof RateLimitedError) return e.retryAfterMs;
    if (e instanceof FloodgateError) return e.status;
    throw e;
  }
  const sub = fg.subscribe("public:live.reactions", (m: Message) => m.seq, { after: 0, transport: "sse" });
  sub.close();
  return r.status === "delivered" ? r.seq : sub.lastSeq;
}
