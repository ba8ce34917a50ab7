// One subscriber thread of `npm run bench:fanout` (started by subscriber-threads.mjs): `n` subscriber
// connections on one URL, each counting the seqs it receives (a byte per seq up to `maxSeq`) and the
// time from each message's send (its `t`) to its arrival. `frames` counts text frames, `messages`
// messages (a packed frame holds several); with --max-rate each connection also adds up the `skipped`
// of its subscriber summaries, so the tally can check received + skipped = published, per connection. The connections are of one kind, opened and read by that
// kind's module; the counting and the answers to the main thread are the same for every kind.
import { parentPort, workerData } from "node:worker_threads";
import { now } from "./clock.mjs";
import { floodgateConnection } from "./floodgate-connection.mjs";
import { pusherConnection } from "./pusher-connection.mjs";

/**
 * The kinds of subscriber connection, by name. Each is { open(url, on), read(text) }
 * (floodgate-connection.mjs): a second protocol is one more entry whose `read` gives its messages in
 * Floodgate's shapes, so the tally below counts them alike.
 */
const KINDS = { floodgate: floodgateConnection, pusher: pusherConnection };

/** How often a subscriber's handshake is tried before it counts as failed. */
const OPEN_ATTEMPTS = 4;

subscriberThread(workerData);

function subscriberThread({ kind: kindName, url, n, maxSeq }) {
  const kind = KINDS[kindName];
  if (!kind) throw new Error(`bench:fanout: no subscriber connection of kind "${kindName}"`);
  const seen = [];
  // Per connection, with --max-rate: messages received and skipped (its subscriber summaries' sum).
  const accounts = [];
  let skipped = 0;
  const latencies = [];
  let frames = 0;
  let messages = 0;
  let closed = 0;
  let lastFrameAt = 0;
  let stopping = false;
  // A relay sends one frame text to each of its sockets: read once per thread and shared (a few
  // texts back), the harness spends its CPU on counting rather than on parsing the same text a
  // thousand times, and leaves the cores to the workerd it measures. Read only, never changed.
  const readTexts = new Map();
  const readShared = (text) => {
    let read = readTexts.get(text);
    if (read === undefined) {
      read = kind.read(text);
      if (readTexts.size >= 64) readTexts.delete(readTexts.keys().next().value);
      readTexts.set(text, read);
    }
    return read;
  };
  // Presence frames: `interval` and `join`/`leave` per connection, `state` in all.
  const presence = { interval: [], announce: [], states: 0 };
  // A handshake refused in the connection storm (the listen backlog, an accept that came too late)
  // is tried again a few times; only one that never opens counts as failed.
  let retried = 0;
  const open = (counts) => {
    const me = presence.interval.length;
    presence.interval.push(0);
    presence.announce.push(0);
    const account = { received: 0, skipped: 0 };
    accounts.push(account);
    const attempt = (left) =>
      new Promise((resolve) => {
        let opened = false;
        kind.open(url, {
          open: () => {
            opened = true;
            resolve({ ok: true });
          },
          error: () => {
            if (opened) return;
            if (left === 0) return resolve({ ok: false });
            retried++;
            setTimeout(() => attempt(left - 1).then(resolve), 250);
          },
          close: () => {
            if (opened && !stopping) closed++;
          },
          text: (text) => {
            const at = now();
            frames++;
            lastFrameAt = at;
            for (const m of readShared(text)) {
              if (m.type === "presence") {
                if (m.action === "interval") presence.interval[me]++;
                else if (m.action === "state") presence.states++;
                else presence.announce[me]++;
                continue;
              }
              if (m.type === "summary" && m.scope === "subscriber") {
                account.skipped += m.skipped;
                skipped += m.skipped;
                continue;
              }
              if (m.type !== "message") continue;
              messages++;
              account.received++;
              if (Number.isInteger(m.seq) && m.seq > 0 && m.seq <= maxSeq) counts[m.seq]++;
              if (typeof m.data?.t === "number") latencies.push(at - m.data.t);
            }
          },
        });
      });
    return attempt(OPEN_ATTEMPTS - 1);
  };
  parentPort.on("message", async ({ command, payload }) => {
    if (command === "open") {
      let failed = 0;
      // 100 handshakes in flight at a time: thousands at once overflow the listen backlog.
      for (let k = 0; k < n; k += 100) {
        const batch = Array.from({ length: Math.min(100, n - k) }, () => {
          const counts = new Uint8Array(maxSeq + 1);
          seen.push(counts);
          return open(counts);
        });
        failed += (await Promise.all(batch)).filter((r) => !r.ok).length;
      }
      parentPort.postMessage({ failed, retried });
    } else if (command === "count") {
      // Messages, and with --max-rate the skips their summaries told: together, what was offered.
      parentPort.postMessage(messages + skipped);
    } else if (command === "tally") {
      let lost = 0;
      let duplicated = 0;
      for (const counts of seen) {
        for (const seq of payload) if (counts[seq] === 0) lost++;
        for (const c of counts) if (c > 1) duplicated += c - 1;
      }
      stopping = true;
      const out = Float64Array.from(latencies);
      const most = (xs) => xs.reduce((a, x) => Math.max(a, x), 0);
      const summary = {
        intervalMost: most(presence.interval),
        announceMost: most(presence.announce),
        states: presence.states,
      };
      // With --max-rate: connections whose received + skipped is not every delivered publish, exactly.
      const offered = payload.length;
      const accountsOff = accounts.filter((a) => a.received + a.skipped !== offered).length;
      parentPort.postMessage(
        {
          frames,
          messages,
          lost,
          duplicated,
          closed,
          lastFrameAt,
          latencies: out,
          presence: summary,
          skipped,
          accountsOff,
          receivedFewest: accounts.reduce((a, x) => Math.min(a, x.received), Number.POSITIVE_INFINITY),
          receivedMost: accounts.reduce((a, x) => Math.max(a, x.received), 0),
        },
        [out.buffer],
      );
    }
  });
}
