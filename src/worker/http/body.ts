import { ApiError, invalidArgument } from "../../wire/errors";
/**
 * Request bodies read within a byte bound and parsed as JSON (docs/api.md, Bounds). Each failure is
 * an ApiError in the API's error shape (docs/api.md).
 */

/**
 * Reads a body of at most `max` bytes, counting as it streams (a missing or lying Content-Length
 * cannot get more through). @throws ApiError 413
 */
export async function readBody(request: Request, max: number): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > max) throw tooLarge(max);
  if (!request.body) return new Uint8Array(0);
  // With a declared length the runtime delivers exactly that many bytes (HTTP framing), so one
  // buffered read is safe and costs far less CPU than pulling chunks through a reader.
  if (declared !== null && /^\d+$/.test(declared)) return new Uint8Array(await request.arrayBuffer());
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > max) {
      await reader.cancel().catch(() => {});
      throw tooLarge(max);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  return out;
}

function tooLarge(max: number): ApiError {
  return new ApiError("payload_too_large", `body is larger than ${max} bytes`);
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/** Decodes UTF-8 JSON. @throws ApiError 400 for invalid UTF-8, empty bodies or invalid JSON. */
export function parseJsonBody(bytes: Uint8Array): unknown {
  return parseJsonText(bytes).value;
}

/**
 * Decodes UTF-8 JSON and also returns it as one line of text, exactly as sent otherwise: numbers keep
 * every digit (JSON.parse would round 2^53+1), and a raw CR or LF can only be whitespace in valid JSON,
 * so replacing it keeps the value while making it fit one SSE `data:` line.
 */
export function parseJsonText(bytes: Uint8Array): { value: unknown; text: string } {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw invalidArgument("body is not valid UTF-8");
  }
  if (text.trim().length === 0) throw invalidArgument("body must be a JSON value");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw invalidArgument("body is not valid JSON");
  }
  return { value, text: text.replace(/[\r\n]/g, " ").trim() };
}

/** Reads and parses a JSON body of at most `max` bytes. */
export async function readJson(request: Request, max: number): Promise<unknown> {
  return parseJsonBody(await readBody(request, max));
}
