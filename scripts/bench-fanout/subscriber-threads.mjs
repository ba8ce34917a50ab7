// The main thread's side of bench:fanout's subscriber threads: one Node thread cannot read 100,000
// frames/s and still timestamp them on time, so the subscribers of a size are spread over threads
// (subscriber-thread.mjs), each asked in turn to open its connections, count, and tally.
import { Worker } from "node:worker_threads";

/**
 * A subscriber thread opening `n` connections of `kind` (a name subscriber-thread.mjs knows, e.g.
 * "floodgate") on `url`, counting seqs up to `maxSeq`, with `ask(command, payload)` answered by its
 * next reply: "open" (→ { failed, retried }), "count" (→ messages so far), "tally" with the delivered
 * seqs (→ the thread's figures), and `stop()`.
 */
export function startSubscriberThread({ kind, url, n, maxSeq }) {
  const worker = new Worker(new URL("./subscriber-thread.mjs", import.meta.url), {
    workerData: { kind, url, n, maxSeq },
  });
  const waiting = [];
  worker.on("message", (m) => waiting.shift()?.resolve(m));
  worker.on("error", (e) => {
    for (const w of waiting.splice(0)) w.reject(e);
  });
  return {
    ask: (command, payload) =>
      new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        worker.postMessage({ command, payload });
      }),
    stop: () => worker.terminate(),
  };
}
