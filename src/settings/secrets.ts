/**
 * The secrets and how strong they must be (docs/security.md, "Secrets"). A short HMAC key or admin
 * bearer can be guessed offline or by brute force, so a weak one is bad configuration: the routes
 * that need it answer 500 naming it, `/healthz` fails so a deploy's health check catches it, and
 * `scripts/check-config.mjs` refuses it. Pure, so that script runs the same rule.
 */

export type SecretName = "TOKEN_SECRET" | "ADMIN_TOKEN" | "PUSHER_APP_SECRET";

/** Least length of each secret: TOKEN_SECRET in UTF-8 bytes (the HMAC key), ADMIN_TOKEN in characters. */
export const SECRET_MIN = {
  TOKEN_SECRET: { length: 32, unit: "bytes" },
  ADMIN_TOKEN: { length: 16, unit: "characters" },
  PUSHER_APP_SECRET: { length: 16, unit: "characters" },
} as const satisfies Record<SecretName, { length: number; unit: string }>;

const encoder = new TextEncoder();

/**
 * What a bearer token may hold (RFC 6750's b64token, the grammar Hono's `bearerAuth` checks): an
 * ADMIN_TOKEN with any other character could never be presented, so it is bad configuration.
 */
const BEARER_TOKEN = /^[A-Za-z0-9._~+/-]+=*$/;

/** What is wrong with a secret's value, or null when it is usable. */
export function secretProblem(name: SecretName, value: unknown): string | null {
  // Asked on every request with the same value: the answer for the last value seen is kept (a
  // rotated secret is a new value and is checked again).
  const last = lastChecked.get(name);
  if (last && last.value === value) return last.problem;
  const problem = checkSecret(name, value);
  lastChecked.set(name, { value, problem });
  return problem;
}

const lastChecked = new Map<SecretName, { value: unknown; problem: string | null }>();

function checkSecret(name: SecretName, value: unknown): string | null {
  if (typeof value !== "string" || value.length === 0) return `${name} is not set`;
  const min = SECRET_MIN[name];
  const length = name === "TOKEN_SECRET" ? encoder.encode(value).byteLength : value.length;
  // The message states the minimum only: how long a secret is narrows a guess, so no answer says it.
  if (length < min.length) return `${name} is too weak: it must be at least ${min.length} ${min.unit}`;
  if (name === "ADMIN_TOKEN" && !BEARER_TOKEN.test(value))
    return `${name} can only hold A-Z a-z 0-9 - . _ ~ + / and a trailing =, as a bearer token`;
  return null;
}

/** The problems of the secrets that are set but weak (a missing secret only fails the routes that need it). */
export function weakSecrets(env: object): { name: SecretName; problem: string }[] {
  const e = env as Record<string, unknown>;
  const out: { name: SecretName; problem: string }[] = [];
  for (const name of Object.keys(SECRET_MIN) as SecretName[]) {
    const value = e[name];
    if (typeof value !== "string" || value.length === 0) continue;
    const problem = secretProblem(name, value);
    if (problem) out.push({ name, problem });
  }
  return out;
}

/**
 * The secret values the repository itself shows (docs/security.md, "Secrets"): `NAME=value` and
 * `NAME: "value"` assignments of either secret, and `Bearer <value>` examples, in the given files'
 * text (.dev.vars.example, the README, the docs, the test configuration). Anyone can read them, so
 * `scripts/check-config.mjs` refuses to deploy any of them. Pure: the script passes the files in.
 */
export function exampleSecrets(texts: readonly string[]): Set<string> {
  const found = new Set<string>();
  const names = Object.keys(SECRET_MIN).join("|");
  const assignment = new RegExp(`\\b(?:${names})\\s*[=:]\\s*["'\`]?([A-Za-z0-9._~+/=-]{4,})`, "g");
  const bearerExample = /\bBearer\s+([A-Za-z0-9._~+/-]+=*)/g;
  for (const text of texts) {
    for (const m of text.matchAll(assignment)) found.add(m[1] as string);
    for (const m of text.matchAll(bearerExample)) {
      const value = m[1] as string;
      // `Bearer $ADMIN`, `Bearer <ADMIN_TOKEN>`, `Bearer ${token}` are placeholders, not values.
      if (value.length >= SECRET_MIN.ADMIN_TOKEN.length) found.add(value);
    }
  }
  return found;
}
