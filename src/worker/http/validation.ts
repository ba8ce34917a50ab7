/**
 * JSON bodies checked by a schema (docs/api.md: the token and admin bodies). The same zod schemas
 * describe those bodies in the OpenAPI document (src/worker/http/openapi.ts), so the document and the checks
 * cannot disagree. Every failure is the 400 of docs/api.md with one message.
 *
 * Not @hono/zod-validator: its `json` target reads the body with `c.req.json()` (no size bound, its
 * own error text) and skips the check unless `Content-Type` is JSON, while these routes read at
 * most a few KiB, counted as it streams, whatever the content type (`readJson`).
 */

import { createMiddleware } from "hono/factory";
import * as z from "zod";
import { type ApiError, invalidArgument } from "../../wire/errors";
import type { AppEnv } from "../app-env";
import { readJson } from "./body";

/**
 * A failed parse as the 400 of docs/api.md: an unknown field is named first (as "unknown field "x""),
 * else the first problem in the schema's field order, with the message the schema gives it.
 */
export function invalidBody(error: z.ZodError): ApiError {
  const unknown = error.issues.find((i) => i.code === "unrecognized_keys");
  if (unknown) return invalidArgument(`unknown field "${unknown.keys[0]}"`);
  return invalidArgument(error.issues[0]?.message ?? "body is invalid");
}

/**
 * Middleware that reads a JSON body of at most `maxBytes` and checks it with `schema`; the handler
 * reads the parsed value with `c.req.valid("json")`. @throws ApiError 400 / 413
 */
export function jsonBody<S extends z.ZodType>(schema: S, maxBytes: number) {
  return createMiddleware<AppEnv, string, { in: { json: z.input<S> }; out: { json: z.output<S> } }>(async (c, next) => {
    const parsed = schema.safeParse(await readJson(c.req.raw, maxBytes));
    if (!parsed.success) throw invalidBody(parsed.error);
    c.req.addValidatedData("json", parsed.data as object);
    await next();
  });
}

/** A body that must be a JSON object with only `shape`'s fields; `notObject` says what it should be. */
export function bodyObject<T extends z.core.$ZodLooseShape>(shape: T, notObject: string) {
  return z.strictObject(shape, {
    error: (issue) => (issue.code === "invalid_type" ? notObject : undefined),
  });
}

/** The issue a transform reports for a value it cannot take (`ctx.addIssue` in a zod transform). */
export function custom(message: string, input: unknown) {
  return { code: "custom" as const, message, input };
}
