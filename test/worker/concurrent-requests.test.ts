/**
 * Concurrency across real request contexts. `exports.default.fetch` gives every request its own
 * context, as in production; workerd refuses I/O from one request's context on behalf of another,
 * and code that awaits a promise another request settles runs in that other context. These tests
 * fail (with "Cannot perform I/O on behalf of a different request", or by hanging) if any shared work
 * — the limiter batch, the analytics batch, the drop-rate read, the HMAC key — is awaited across
 * requests. (Tests that call the handler directly run in one context and cannot see this.)
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { services } from "../../src/worker/services";
import {
  adminHeaders,
  call,
  callAndWait,
  freshIp,
  historyOf,
  mint,
  publishTo,
  setRate,
  uniq,
  until,
} from "../support/helpers";

/** The deployment's record of dropped messages (wrangler.toml ANALYTICS_CHANNEL). */
const ANALYTICS = env.ANALYTICS_CHANNEL;

describe("real request contexts", () => {
  it("50 concurrent publishes from one subject: one coalesced limiter, all delivered once", async () => {
    const ch = `public:ctx.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:ctx.*"], rl: "10000/s" });
    const callsBefore = services(env).gate.calls;
    const appendsBefore = services(env).publishBatcher.calls;
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        publishTo(ch, access_token, { i }).then(async (r) => ({
          status: r.status,
          seq: ((await r.json()) as { seq: number }).seq,
        })),
      ),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(50);
    expect(services(env).gate.calls - callsBefore).toBeLessThan(50); // limiter batches did form
    expect(services(env).publishBatcher.calls - appendsBefore).toBeLessThan(50); // and channel batches
    const history = await historyOf(ch, null, "?limit=100");
    expect(history.map((f) => f.seq)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    // Each publish was answered with the seq of its own message.
    results.forEach((r, i) => {
      expect(history.find((f) => f.seq === r.seq)?.data).toEqual({ i });
    });
  });

  it("the same Idempotency-Key twice in one channel batch delivers once and answers both alike", async () => {
    const ch = `public:ctx.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:ctx.*"], rl: "10000/s" });
    const answers = await Promise.all(
      Array.from({ length: 6 }, () =>
        publishTo(ch, access_token, { n: 1 }, { "idempotency-key": "twin" }).then(async (r) => ({
          status: r.status,
          body: await r.json(),
        })),
      ),
    );
    expect(answers.every((a) => a.status === 200)).toBe(true);
    for (const a of answers) expect(a.body).toEqual(answers[0]?.body);
    expect(await historyOf(ch, null)).toHaveLength(1);
  });

  it("50 concurrent drops: every copy reaches the analytics channel", async () => {
    const ch = `public:ctx.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:ctx.*"], rl: "10000/s" });
    const analyst = (await mint({ sub: uniq("analyst"), channels: ["private:floodgate.analytics.dropped"] }))
      .access_token;
    await setRate(ch, 1);
    const statuses = await Promise.all(
      Array.from({ length: 50 }, (_, i) => publishTo(ch, access_token, { i }).then((r) => r.status)),
    );
    expect(statuses.every((s) => s === 202)).toBe(true);
    // Copies travel after the responses: the record holds each one once it has landed (bounded wait).
    // Each read from its own client IP: the polls must not spend one read budget (a 429 is not a miss).
    const copies = async () => {
      const res = await call(`/v1/history/${ANALYTICS}?source_channel=${ch}&limit=1000`, {
        headers: { authorization: `Bearer ${analyst}`, "cf-connecting-ip": freshIp() },
      });
      expect(res.status).toBe(200);
      const { messages } = (await res.json()) as { messages: { data: { message: { i: number } } }[] };
      return messages.map((f) => f.data.message.i);
    };
    await until(async () => (await copies()).length >= 50, "50 copies in the analytics channel");
    expect((await copies()).sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    // And the source channel counted each drop once.
    const stats = (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as {
      dropped_total: number;
    };
    expect(stats.dropped_total).toBe(50);
  });

  it("concurrent first publishes to new channels share nothing they must wait on", async () => {
    const { access_token } = await mint({ sub: uniq(), channels: ["public:ctx.*"], rl: "10000/s" });
    const chans = Array.from({ length: 10 }, () => `public:ctx.${uniq()}`);
    const statuses = await Promise.all(
      chans.flatMap((ch) =>
        Array.from({ length: 5 }, () => publishTo(ch, access_token, { x: 1 }).then((r) => r.status)),
      ),
    );
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect((await call("/healthz")).status).toBe(200);
  });
});
