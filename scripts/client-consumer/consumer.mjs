// What a project that installed @floodgate/client does with it, run by scripts/test-client-package.mjs
// from Node 20, Node 22 and Chromium against a started Worker. The import below is the one
// docs/client.md shows: Node resolves it in the temporary project's node_modules, the browser through
// the page's import map. Each step throws on a wrong answer and reports one line through `log`.
import { FloodgateClient } from "@floodgate/client";

/**
 * @param {{ base: string, token: string, limitedToken: string, prefix: string, log: (line: string) => void }} o
 *   `prefix` is `public:consumer.<runtime>-`; `token` may publish and subscribe to `<prefix>*` and to
 *   `private:consumer.<runtime>.secret`; `limitedToken` may publish to `<prefix>*` once a second.
 */
export async function run({ base, token, limitedToken, prefix, log }) {
  const check = (ok, what) => {
    if (!ok) throw new Error(what);
    log(what);
  };

  // 1. An answer lost on the way back: the client retries with the same Idempotency-Key and the
  // Worker answers the first result again, so the message exists once.
  const lost = `${prefix}lost`;
  const keys = [];
  let dropNextAnswer = true;
  const lossy = new FloodgateClient({
    baseUrl: base,
    accessToken: token,
    fetch: async (input, init) => {
      keys.push(new Headers(init?.headers).get("idempotency-key"));
      const res = await fetch(input, init);
      if (!dropNextAnswer) return res;
      dropNextAnswer = false;
      await res.arrayBuffer();
      throw new TypeError("connection reset (answer lost)");
    },
  });
  const first = await lossy.publish(lost, { n: 1 });
  const history = await (await fetch(`${base}/v1/history/${lost}?after=0`)).json();
  check(
    first.status === "delivered" &&
      keys.length === 2 &&
      keys[0] === keys[1] &&
      history.messages.length === 1 &&
      history.messages[0].id === first.id,
    `publish retried after a lost answer with the same Idempotency-Key: delivered once (seq ${first.seq})`,
  );

  // 2. 429: the client waits what Retry-After says and tries again.
  const limited = `${prefix}limited`;
  let attempts = 0;
  const patient = new FloodgateClient({
    baseUrl: base,
    accessToken: limitedToken,
    fetch: (input, init) => {
      attempts++;
      return fetch(input, init);
    },
  });
  await patient.publish(limited, { n: 1 });
  attempts = 0;
  const t0 = Date.now();
  const second = await patient.publish(limited, { n: 2 });
  check(
    second.status === "delivered" && second.seq === 2 && attempts >= 2 && Date.now() - t0 >= 500,
    `publish over the budget retried after Retry-After: delivered after ${attempts} attempts, ${Date.now() - t0} ms`,
  );

  // 3. Subscribe from the start, then live; 4. resume after a seq: only what came later.
  const live = `${prefix}live`;
  const fg = new FloodgateClient({ baseUrl: base, accessToken: token, maxBackoffMs: 300 });
  const a = await fg.publish(live, { n: 1 });
  const b = await fg.publish(live, { n: 2 });
  const all = collect(fg, live, { after: 0 }, 3);
  const resumed = collect(fg, live, { after: a.seq }, 2);
  await waitFor(() => all.seqs.length === 2 && resumed.seqs.length === 1, "the retained messages to replay");
  const c = await fg.publish(live, { n: 3 });
  await Promise.all([all.done, resumed.done]);
  // Node 20 has no global WebSocket (without --experimental-websocket): there `auto` ends on SSE.
  const expected = typeof globalThis.WebSocket === "function" ? "websocket" : "sse";
  check(
    all.sub.transport === expected && same(all.seqs, [a.seq, b.seq, c.seq]),
    `subscribe (${all.sub.transport}) with after=0 replays then goes live: seqs ${all.seqs}`,
  );
  check(same(resumed.seqs, [b.seq, c.seq]), `subscribe resumed with after=${a.seq} gets only seqs ${resumed.seqs}`);

  // 5. A private channel: the access token goes with the subscription (never in the URL).
  const secret = `${prefix.replace(/^public:/, "private:").replace(/-$/, "")}.secret`; // 3+ components
  const p = await fg.publish(secret, { n: 1 });
  const priv = collect(fg, secret, { after: 0 }, 1);
  await priv.done;
  check(
    same(priv.seqs, [p.seq]),
    `subscribe (${priv.sub.transport}) to a private channel with the access token: seqs ${priv.seqs}`,
  );

  // 6. WebSockets blocked (a proxy that refuses upgrades): after 3 failed opens it switches to SSE.
  const blocked = new FloodgateClient({
    baseUrl: base,
    accessToken: token,
    maxBackoffMs: 300,
    openWebSocket: () => Promise.reject(new Error("upgrade refused")),
  });
  const viaSse = collect(blocked, live, { after: b.seq }, 2);
  await waitFor(() => viaSse.seqs.length === 1, "the SSE fallback to replay");
  const d = await fg.publish(live, { n: 4 });
  await viaSse.done;
  check(
    viaSse.sub.transport === "sse" && same(viaSse.seqs, [c.seq, d.seq]),
    `with WebSockets refused the subscription falls back to SSE and resumes: seqs ${viaSse.seqs}`,
  );

  // 7. Connection state: connecting → live with `ready`, then closed; with no WebSocket in the
  // runtime (Node 20) `auto` starts on SSE at once, so no failed open is reported on the way.
  const states = [];
  const errors = [];
  const watched = fg.subscribe(live, () => {}, {
    after: d.seq,
    onState: (state, change) => states.push(`${change.previous}→${state}`),
    onError: (e) => errors.push(e instanceof Error ? e.message : String(e)),
  });
  await withTimeout(watched.ready, "the subscription to be live");
  const wasLive = watched.state === "live";
  watched.close();
  const early = fg.subscribe(live, () => {}, {});
  early.close();
  const rejected = await early.ready.then(
    () => false,
    () => true,
  );
  check(
    wasLive &&
      watched.transport === expected &&
      same(states, ["connecting→live", "live→closed"]) &&
      errors.length === 0 &&
      rejected,
    `state events on ${watched.transport}: ${states.join(", ")}; ready resolved once live, no error on the way (${errors.join("; ") || "none"}); closed before live, ready rejects`,
  );
}

/** Subscribes and resolves `done` once `count` messages arrived, then closes. */
function collect(client, channel, options, count) {
  const seqs = [];
  let finish;
  const done = new Promise((resolve) => {
    finish = resolve;
  });
  const sub = client.subscribe(
    channel,
    (m) => {
      seqs.push(m.seq);
      if (seqs.length === count) {
        sub.close();
        finish();
      }
    },
    options,
  );
  const bounded = withTimeout(done, `${count} messages on ${channel}`);
  bounded.catch(() => {}); // reported where it is awaited; not an unhandled rejection if a step fails first
  return { seqs, sub, done: bounded };
}

async function waitFor(ok, what, ms = 10_000) {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function withTimeout(promise, what, ms = 10_000) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function same(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
