/**
 * What the audience-shard tests share (test/worker/shards/, test/channel/shard-registry-storage.test.ts):
 * tokens with a group, WebSocket subscribers and publishes with a request continent, a channel's stats.
 */
import { createExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect } from "vitest";
import worker from "../../src/index";
import { adminHeaders, BASE, call, callAndWait, type Frame, freshIp, mint, uniq } from "./helpers";

export const ANALYTICS = "private:floodgate.analytics.dropped";

export const stub = (key: string) => env.CHANNEL.get(env.CHANNEL.idFromName(key));

/** A token with a group (or none) that may publish to and subscribe to `patterns`. */
export async function member(patterns: string[], group?: string, scopes?: string[]): Promise<string> {
  const body: Record<string, unknown> = { sub: uniq("m"), channels: patterns, rl: "100000/s" };
  if (group) body.group = group;
  if (scopes) body.scopes = scopes;
  return (await mint(body)).access_token;
}

/** A WebSocket subscriber with a token (or none) and, optionally, a request continent. */
export async function socket(channel: string, token: string | null, continent?: string, query = "") {
  const headers: Record<string, string> = { upgrade: "websocket", "cf-connecting-ip": freshIp() };
  if (token) headers.authorization = `Bearer ${token}`;
  const init: RequestInit & { cf?: unknown } = { headers };
  if (continent) init.cf = { continent };
  const res = await worker.fetch(
    new Request(`${BASE}/v1/subscribe/${channel}${query}`, init as RequestInit),
    env,
    createExecutionContext(),
  );
  if (res.status !== 101 || !res.webSocket) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  const frames: Frame[] = [];
  const raw: string[] = [];
  ws.accept();
  ws.addEventListener("message", (ev) => {
    raw.push(ev.data as string);
    frames.push(JSON.parse(ev.data as string) as Frame);
  });
  return { ws, frames, raw };
}

/** Publishes through the Worker, waiting for its background work; `continent` sets `request.cf`. */
export async function pub(
  channel: string,
  token: string,
  data: unknown,
  headers: Record<string, string> = {},
  continent?: string,
): Promise<Response> {
  const init: RequestInit & { cf?: unknown } = {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(data),
  };
  if (continent) init.cf = { continent };
  return callAndWait(`/v1/publish/${channel}`, init as RequestInit);
}

export async function statsOf(channel: string): Promise<Record<string, unknown>> {
  const res = await call(`/v1/channels/${channel}/stats`, { headers: adminHeaders() });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

export const payloads = (frames: Frame[]) => frames.map((f) => f.data);
