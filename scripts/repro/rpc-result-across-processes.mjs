#!/usr/bin/env node
// Why the Worker disposes an object's answer once it has read it (src/platform/rpc-result.ts): a
// Worker calls a Durable Object method that answers a plain object, keeps the answers a moment, then
// makes garbage so V8 collects them. With the object in another workerd process, reached through the
// dev registry (as `bench:reads --split` reaches the channel's objects), workerd prints "An RPC result
// was not disposed properly" unless the Worker disposed each answer; with the object in the same
// process it prints nothing. The registry's proxy passes each answer on from a call of its own, so it
// arrives holding that call's disposer. Each case runs in a process of its own (workerd prints the
// warning once per process).
//
// Usage: npx node scripts/repro/rpc-result-across-processes.mjs   Exits 1 if any case printed the warning.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startWorker } from "../lib/workerd.mjs";

const WARNING = "An RPC result was not disposed properly";
const CASES = {
  "other process, answers kept": { remote: true, dispose: false },
  "other process, answers disposed": { remote: true, dispose: true },
  "same process, answers kept": { remote: false, dispose: false },
};

const owner = `
import { DurableObject } from "cloudflare:workers";
export class Room extends DurableObject {
  presence(channel) { return { channel, occupancy: 1, mode: "announce" }; }
}`;
const reader = (dispose) => `
export default {
  async fetch(request, env) {
    const room = env.ROOM.get(env.ROOM.idFromName("one"));
    let kept = [];
    for (let i = 0; i < 200; i++) {
      const answer = await room.presence("c" + i);
      ${dispose ? "answer[Symbol.dispose]();" : ""}
      kept.push(answer);
    }
    kept = null;
    let garbage = 0;
    for (let i = 0; i < 3000; i++) garbage += new Array(100000).fill(i).length;
    return new Response(String(garbage));
  },
};`;

const name = process.argv[2];
if (name === undefined) {
  let failed = false;
  for (const c of Object.keys(CASES)) {
    const run = spawnSync(process.execPath, [fileURLToPath(import.meta.url), c], { encoding: "utf8" });
    const warned = `${run.stdout}${run.stderr}`.includes(WARNING);
    failed ||= warned || run.status !== 0;
    console.log(
      `${c}: ${run.status !== 0 ? `failed (${run.status})\n${run.stderr}` : warned ? "warned" : "no warning"}`,
    );
  }
  process.exit(failed ? 1 : 0);
}

const { remote, dispose } = CASES[name];
const registry = mkdtempSync(join(tmpdir(), "repro-registry-"));
const module = (contents) => [{ type: "ESModule", path: "index.mjs", contents }];
const first = remote
  ? await startWorker({
      name: "owner",
      registry,
      modules: module(`${owner}\nexport default { fetch: () => new Response("owner") };`),
      durableObjects: { ROOM: { className: "Room" } },
    })
  : null;
const second = await startWorker({
  name: "reader",
  registry: remote ? registry : undefined,
  modules: module(remote ? reader(dispose) : `${owner}\n${reader(dispose)}`),
  durableObjects: { ROOM: remote ? { className: "Room", scriptName: "owner" } : { className: "Room" } },
});
for (let i = 0; i < 8; i++) await (await fetch(second.base)).text();
await new Promise((r) => setTimeout(r, 500));
await second.stop();
await first?.stop();
rmSync(registry, { recursive: true, force: true });
