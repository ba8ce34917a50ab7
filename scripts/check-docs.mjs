#!/usr/bin/env node
// `npm run check:docs`: keeps README.md and docs/*.md true.
// 1. Links: every relative link resolves to a file inside the repository, and every `#anchor` to a
//    heading of the file it names (GitHub's heading ids).
// 2. Runnable examples: a ```sh block right after the line `<!-- docs-check: run -->` is run with
//    bash against a Worker started here the way `npm start` starts it (fresh local storage, the local
//    sampler off), with `http://localhost:8787` pointing at it. It must exit 0. When the next fenced
//    block follows the line `<!-- docs-check: output -->`, that block is what the run prints: each of
//    its lines must appear in the output, in that order (other lines may come between), where `…`
//    stands for any text (ids, times).
// 3. Self-contained: no code, doc or config refers to a file outside the repository, or cites "the
//    contract" or a "§N" of one: the API is docs/api.md and its neighbours, cited by section link, not a
//    document a reader who cloned the repo does not have.
// `--links-only` skips the runs (no Worker needed).
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fail, finish, pass } from "./lib/checks.mjs";
import { startDev } from "./lib/dev-server.mjs";
import { options } from "./lib/options.mjs";
import { root } from "./lib/root.mjs";

const values = options("check:docs", { "links-only": false });
const PORT = 8796;
const BASE = `http://127.0.0.1:${PORT}`;

const docs = [join(root, "README.md"), ...mdFiles(join(root, "docs"))];

function mdFiles(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".md"))
    .map((f) => join(dir, f));
}

/** GitHub's id for a heading: lower case, punctuation but `-` and `_` removed, spaces to `-`. */
function slug(heading) {
  return heading
    .trim()
    .toLowerCase()
    .replace(/<[^>]*>/g, "")
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

const anchorCache = new Map();
function anchorsOf(file) {
  let set = anchorCache.get(file);
  if (!set) {
    set = new Set();
    const seen = new Map();
    let fenced = false;
    for (const line of readFileSync(file, "utf8").split("\n")) {
      if (line.startsWith("```")) fenced = !fenced;
      const m = !fenced && line.match(/^#{1,6}\s+(.*)$/);
      if (!m) continue;
      const base = slug(m[1].replace(/`/g, ""));
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      set.add(n === 0 ? base : `${base}-${n}`);
    }
    anchorCache.set(file, set);
  }
  return set;
}

// ---- 1. links -------------------------------------------------------------------------------------
console.log("links");
let links = 0;
for (const file of docs) {
  const where = relative(root, file);
  const text = readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "");
  for (const m of text.matchAll(/\[[^\]]*\]\(([^)\s]+)\)/g)) {
    const target = m[1];
    if (/^[a-z]+:/i.test(target)) continue; // http:, https:, mailto:
    links++;
    const [path, anchor] = target.split("#");
    const dest = path ? resolve(dirname(file), path) : file;
    if (relative(root, dest).startsWith("..")) {
      fail(`${where}: ${target} points outside the repository`);
      continue;
    }
    if (!existsSync(dest)) {
      fail(`${where}: ${target}: no such file`);
      continue;
    }
    if (anchor && dest.endsWith(".md") && statSync(dest).isFile() && !anchorsOf(dest).has(anchor)) {
      fail(`${where}: ${target}: no heading with that id in ${relative(root, dest)}`);
    }
  }
}
console.log(`  ${links} relative links checked`);

// ---- 3. no references outside the repository -------------------------------------------------------
console.log("references outside the repository");
const OUTSIDE = /CONTRACT(\.md)?\s*§|\.\.\/shared\/|\bthe contract\b|§\s*\d/i;
const SKIP_DIRS = new Set(["node_modules", ".git", ".wrangler", "test-artifacts", "dist", "vendor"]);
function sourceFiles(dir) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP_DIRS.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (/\.(ts|mjs|js|md|toml|json|html|css)$/.test(entry.name) && entry.name !== "package-lock.json")
      out.push(path);
  }
  return out;
}
let scanned = 0;
for (const file of [...sourceFiles(root)].filter((f) => !f.endsWith("worker-configuration.d.ts"))) {
  if (file === fileURLToPath(import.meta.url)) continue; // this file names the pattern
  scanned++;
  readFileSync(file, "utf8")
    .split("\n")
    .forEach((line, i) => {
      if (OUTSIDE.test(line)) fail(`${relative(root, file)}:${i + 1}: refers outside the repository: ${line.trim()}`);
    });
}
console.log(`  ${scanned} files scanned`);

// ---- 2. runnable examples ---------------------------------------------------------------------------

/** The runnable blocks of a file: `{ line, script, expected }`. */
function runnableBlocks(file) {
  const lines = readFileSync(file, "utf8").split("\n");
  const blocks = [];
  const fenceAt = (i) => {
    // The fenced block starting at line i (the ``` line): its body and the index after it.
    const body = [];
    let j = i + 1;
    while (j < lines.length && !lines[j].startsWith("```")) body.push(lines[j++]);
    return { body: body.join("\n"), end: j + 1 };
  };
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== "<!-- docs-check: run -->") continue;
    const start = i + 1;
    if (!lines[start]?.startsWith("```sh")) {
      fail(`${relative(root, file)}:${i + 1}: docs-check: run is not followed by a \`\`\`sh block`);
      continue;
    }
    const script = fenceAt(start);
    let expected = null;
    let k = script.end;
    while (k < lines.length && lines[k].trim() === "") k++;
    // Prose may stand between the script and its output block.
    for (let p = k; p < Math.min(lines.length, k + 12); p++) {
      if (lines[p].trim() === "<!-- docs-check: output -->" && lines[p + 1]?.startsWith("```")) {
        expected = fenceAt(p + 1).body;
        break;
      }
      if (lines[p].startsWith("```") || lines[p].trim() === "<!-- docs-check: run -->") break;
    }
    blocks.push({ line: start + 1, script: script.body, expected });
  }
  return blocks;
}

/** Each expected line, as a pattern where `…` is any text, must match a later output line. */
function compare(expected, output) {
  const out = output.split("\n");
  let at = 0;
  for (const want of expected.split("\n")) {
    if (want.trim() === "") continue;
    const pattern = new RegExp(
      `^${want
        .split("…")
        .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
        .join(".*?")}$`,
    );
    const found = out.findIndex((line, idx) => idx >= at && pattern.test(line));
    if (found < 0)
      return `expected a line like\n      ${want}\n    after output line ${at}; the output was:\n${out.map((l) => `      | ${l}`).join("\n")}`;
    at = found + 1;
  }
  return null;
}

function run(cmd, args, opts = {}) {
  return new Promise((resolvePromise) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("close", (code) => resolvePromise({ code, out, err }));
  });
}

const blocks = values["links-only"] ? [] : docs.flatMap((file) => runnableBlocks(file).map((b) => ({ file, ...b })));
if (blocks.length > 0) {
  console.log(`runnable examples (${blocks.length}), against a Worker started on ${BASE}`);
  const server = startDev({ port: PORT, env: { SAMPLER_LOCAL_PERIOD: "0" } });
  await server.ready();
  const binPath = `${join(root, "node_modules", ".bin")}:${process.env.PATH}`;
  for (const b of blocks) {
    const where = `${relative(root, b.file)}:${b.line}`;
    const script = b.script.replaceAll("http://localhost:8787", BASE);
    const { code, out, err } = await run("bash", ["-o", "pipefail", "-c", script], {
      cwd: root,
      env: { ...process.env, PATH: binPath },
    });
    if (code !== 0) {
      fail(`${where}: exited ${code}\n${err}`);
      continue;
    }
    const mismatch = b.expected === null ? null : compare(b.expected, out);
    if (mismatch) fail(`${where}: ${mismatch}`);
    else pass(`${where}${b.expected === null ? " (exit 0)" : " (output as shown)"}`);
  }
  server.stop();
}

finish("check:docs");
