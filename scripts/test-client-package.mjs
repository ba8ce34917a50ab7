#!/usr/bin/env node
// `npm run test:client-package`: the client package (packages/client) used as another project uses
// it. Packs it (`prepare` builds dist/), checks the tarball holds only what a consumer needs,
// installs the tarball into a fresh project under the OS temp directory (offline: it has no
// dependencies), typechecks a consumer file against the installed .d.ts (DOM and Node typings;
// bundler, node10 and nodenext resolution; no skipLibCheck), then runs one consumer program
// (scripts/client-consumer/consumer.mjs: publish retried after a lost answer and after a 429,
// subscribe, resume with `after`, a private channel, SSE fallback) against the Worker in workerd
// from Node 20 (the machine's `node`), Node 22 (the repo's pinned `node`) and Chromium (the page and
// the package's dist/ served under the Worker's own origin, which sends no CORS headers).
// Env: NODE20 (default /usr/bin/node), CHROMIUM_PATH (default /usr/bin/chromium).
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { extname, join, resolve, sep } from "node:path";
import { chromium } from "playwright-core";
import { check, fail, finish, pass } from "./lib/checks.mjs";
import { options } from "./lib/options.mjs";
import { root } from "./lib/root.mjs";
import { mintToken } from "./lib/tokens.mjs";
import { startFloodgate } from "./lib/workerd.mjs";

options("test:client-package", {});

const NODE20 = process.env.NODE20 ?? "/usr/bin/node";
const NODE22 = join(root, "node_modules/.bin/node");
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const CONSUMER_FILES = join(root, "scripts/client-consumer");
const started = Date.now();
const elapsed = () => ((Date.now() - started) / 1000).toFixed(1);

/** Runs a command to completion, killed after 90 s; resolves to { code, out } (stdout and stderr). */
function run(cmd, args, opts = {}) {
  return new Promise((done) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...opts });
    let out = "";
    const timer = setTimeout(() => {
      out += "\n(killed after 90 s)";
      child.kill("SIGKILL");
    }, 90_000);
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ code, out });
    });
    child.on("error", (e) => done({ code: -1, out: String(e) }));
  });
}

const majorOf = (node) => (existsSync(node) ? execFileSync(node, ["--version"], { encoding: "utf8" }).trim() : "none");

const project = mkdtempSync(join(tmpdir(), "floodgate-client-consumer-"));
let worker;
let browser;
try {
  // 0. Inside the repository, the workspace's link works as docs/client.md says: `npm install` built
  //    dist/ (the package's `prepare`), so a script here imports the package by its name. Before step
  //    1 removes dist/: on a fresh clone (CI) it can only have come from the install.
  const linked = await run(
    NODE22,
    [
      "--input-type=module",
      "-e",
      'const m = await import("@floodgate/client"); console.log(Object.keys(m).sort().join(","));',
    ],
    { cwd: root },
  );
  check(
    linked.code === 0 && linked.out.includes("FloodgateClient"),
    `import("@floodgate/client") inside the repository after npm install: ${linked.out.trim().split("\n").at(-1)}`,
  );

  // 1. Pack, with dist/ removed first so the tarball's dist/ can only come from `prepare`.
  rmSync(join(root, "packages/client/dist"), { recursive: true, force: true });
  const packed = await run("npm", ["pack", "-w", "@floodgate/client", "--pack-destination", project, "--json"], {
    cwd: root,
  });
  if (packed.code !== 0) throw new Error(`npm pack failed:\n${packed.out}`);
  const [info] = JSON.parse(packed.out.slice(packed.out.indexOf("[")));
  const files = info.files.map((f) => f.path).sort();
  // What a consumer needs: the README, package.json, and dist/'s modules, each .js with its .d.ts
  // (the entry dist/index.js among them); no sources, configs or build scripts.
  const built = files.filter((f) => f !== "README.md" && f !== "package.json");
  const modules = built.filter((f) => f.endsWith(".js")).map((f) => f.slice(0, -".js".length));
  check(
    files.includes("README.md") &&
      files.includes("package.json") &&
      modules.includes("dist/index") &&
      built.every((f) => f.startsWith("dist/") && (f.endsWith(".js") || f.endsWith(".d.ts"))) &&
      built.length === 2 * modules.length &&
      modules.every((m) => built.includes(`${m}.d.ts`)),
    `npm pack builds the package and ships only ${files.join(", ")} (${info.size} bytes packed)`,
  );

  // 2. Install the tarball into a fresh project, as a consumer would.
  writeFileSync(
    join(project, "package.json"),
    JSON.stringify({ name: "floodgate-consumer", private: true, type: "module" }, null, 2),
  );
  const installed = await run("npm", ["install", `./${info.filename}`, "--offline", "--no-audit", "--no-fund"], {
    cwd: project,
  });
  if (installed.code !== 0) throw new Error(`npm install of the tarball failed:\n${installed.out}`);
  const deps = readdirSync(join(project, "node_modules")).filter((d) => !d.startsWith("."));
  check(
    deps.join() === "@floodgate" && readdirSync(join(project, "node_modules/@floodgate")).join() === "client",
    `npm install of the tarball in ${project} adds the package and nothing else`,
  );
  for (const f of readdirSync(CONSUMER_FILES)) copyFileSync(join(CONSUMER_FILES, f), join(project, f));

  // 3. Typecheck a consumer file against the installed .d.ts as browser and Node projects do.
  const typings = {
    "DOM typings, bundler resolution": {
      lib: ["ES2022", "DOM"],
      types: [],
      module: "ESNext",
      moduleResolution: "bundler",
    },
    "DOM typings, node10 resolution": {
      lib: ["ES2022", "DOM"],
      types: [],
      module: "ES2022",
      moduleResolution: "node10",
    },
    "Node typings, nodenext resolution": {
      lib: ["ES2022"],
      types: ["node"],
      typeRoots: [join(root, "node_modules/@types")],
      module: "NodeNext",
      moduleResolution: "NodeNext",
    },
  };
  await Promise.all(
    Object.entries(typings).map(async ([name, options], i) => {
      const config = join(project, `tsconfig.${i}.json`);
      // skipLibCheck off: the package's .d.ts must itself be free of errors (TypeScript's own lib
      // files are left unchecked to keep this quick).
      const compilerOptions = {
        target: "ES2022",
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        skipDefaultLibCheck: true,
        ...options,
      };
      writeFileSync(config, JSON.stringify({ compilerOptions, files: ["typed.ts"] }));
      const tsc = await run(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", config]);
      check(tsc.code === 0, `tsc accepts the installed package's types (${name})${tsc.code ? `:\n${tsc.out}` : ""}`);
    }),
  );

  console.log(`     packed, installed and typechecked in ${elapsed()} s`);

  // 4. The consumer program against the Worker from Node 20, Node 22 and Chromium.
  worker = await startFloodgate({});
  const optionsFor = async (runtime) => ({
    base: worker.base,
    prefix: `public:consumer.${runtime}-`,
    token: await mintToken(worker, {
      sub: `consumer-${runtime}`,
      channels: ["public:consumer.*", "private:consumer.**"],
    }),
    limitedToken: await mintToken(worker, {
      sub: `consumer-${runtime}-limited`,
      channels: ["public:consumer.*"],
      rl: { rate: 1, per: "1s", burst: 1 },
    }),
  });
  const fromNode = async (label, node, major) => {
    const version = majorOf(node);
    if (!check(version.startsWith(`v${major}.`), `${label}: ${node} is Node ${version}`)) return;
    const r = await run(node, ["node-app.mjs", JSON.stringify(await optionsFor(`node${major}`))], { cwd: project });
    let passed = 0;
    for (const line of r.out.trim().split("\n")) {
      const step = /^(ok|FAIL) (.*)$/.exec(line);
      if (step) passed += check(step[1] === "ok", `${label}: ${step[2]}`) ? 1 : 0;
      else console.log(`     ${label}: ${line}`);
    }
    if (r.code !== 0 || passed === 0) fail(`${label}: the consumer exited with ${r.code}`);
  };
  await Promise.all([fromNode("Node 20", NODE20, 20), fromNode("Node 22", NODE22, 22)]);
  console.log(`     Worker started and both Nodes done at ${elapsed()} s`);

  if (check(existsSync(CHROMIUM), `Chromium at ${CHROMIUM} (apt-get install -y chromium)`)) {
    // A document fulfilled by page.route has no network address, so Chromium's Local Network Access
    // checks count it as public and refuse its WebSocket to 127.0.0.1 (net::ERR_BLOCKED_BY_LOCAL_
    // NETWORK_ACCESS_CHECKS); a page the server itself serves is not affected, so the check is off here.
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-features=LocalNetworkAccessChecks"],
    });
    const page = await browser.newPage();
    // The consumer's page and the installed package under the Worker's origin; /v1/* goes to the Worker.
    const types = { ".html": "text/html", ".mjs": "text/javascript", ".js": "text/javascript" };
    await page.route(`${worker.base}/consumer/**`, (route) => {
      const path = resolve(project, `.${new URL(route.request().url()).pathname.slice("/consumer".length)}`);
      if (!path.startsWith(project + sep) || !existsSync(path)) return route.fulfill({ status: 404 });
      return route.fulfill({ body: readFileSync(path), contentType: types[extname(path)] ?? "text/plain" });
    });
    await page.goto(`${worker.base}/consumer/index.html`);
    await page.waitForFunction(() => typeof window.runConsumer === "function", null, { timeout: 10_000 });
    const result = await page.evaluate((o) => window.runConsumer(o), await optionsFor("chromium"));
    for (const line of result.lines) pass(`Chromium: ${line}`);
    if (result.error) fail(`Chromium: ${result.error}`);
  }
} catch (e) {
  fail(e instanceof Error ? e.message : String(e));
} finally {
  await browser?.close();
  await worker?.stop();
  rmSync(project, { recursive: true, force: true });
}
finish("test:client-package", `${elapsed()} s`);
