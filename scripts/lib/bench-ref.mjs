// An older commit of Floodgate as a source tree the benchmarks can start next to the current one
// (`npm run bench -- --against <ref>`, `npm run bench:profile -- --against <ref>`): a regression
// shows as a ratio below 1 in the same run, on the same machine at the same moment, which no figure
// copied from an older run can give on a machine whose speed moves by 2× within a minute.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readlinkSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { root } from "./root.mjs";

const git = (...args) => execFileSync("git", args, { cwd: root, encoding: "utf8" }).trim();

/**
 * The tree of commit `ref` (anything `git rev-parse` takes: a hash, a tag, `main~20`), unpacked with
 * `git archive` once per commit into the system's temporary directory and reused by later runs.
 * Resolves to { sha, short, tree }. The tree has no node_modules of its own: it links this one's, so
 * its Worker is bundled with today's dependencies (a commit whose package.json pins another Hono
 * says so on the console, since its figures would then include that difference).
 */
export function refTree(ref) {
  let sha;
  try {
    sha = git("rev-parse", "--verify", `${ref}^{commit}`);
  } catch {
    throw new Error(`--against ${ref}: not a commit of this repository`);
  }
  const tree = join(tmpdir(), `floodgate-ref-${sha}`);
  if (!existsSync(join(tree, "src", "index.ts"))) {
    // Unpacked under a temporary name and renamed: an interrupted unpack never passes for a tree.
    const partial = `${tree}.partial-${process.pid}`;
    rmSync(partial, { recursive: true, force: true });
    mkdirSync(partial, { recursive: true });
    execFileSync("sh", ["-c", `git archive ${sha} | tar -x -C "${partial}"`], { cwd: root });
    rmSync(tree, { recursive: true, force: true });
    renameSync(partial, tree);
  }
  // Linked to this checkout's: a link left by another checkout (a worktree since removed) is replaced.
  const link = join(tree, "node_modules");
  let linked = null;
  try {
    linked = readlinkSync(link);
  } catch {}
  if (linked !== join(root, "node_modules")) {
    rmSync(link, { recursive: true, force: true });
    symlinkSync(join(root, "node_modules"), link);
  }
  const theirs = JSON.parse(readFileSync(join(tree, "package.json"), "utf8")).dependencies?.hono;
  const ours = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).dependencies?.hono;
  if (theirs !== ours) console.log(`note: ${ref} pins hono ${theirs}; both are bundled with ${ours}`);
  return { sha, short: sha.slice(0, 7), tree };
}
