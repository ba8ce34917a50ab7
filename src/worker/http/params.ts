/**
 * Path and query parameters shared by the routes (channels, integers, durations) and the client
 * address a per-IP budget is charged to. Each failure is an ApiError in the API's error shape (docs/api.md).
 */

import { DurationError, parseDuration } from "../../settings/durations";
import { isAnalytics } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { type ChannelName, GrammarError, parseChannelName } from "../../wire/channel-names";
import { invalidArgument } from "../../wire/errors";

/** Parses a channel path parameter. @throws ApiError 400 */
export function channelParam(raw: string | undefined): ChannelName {
  try {
    return parseChannelName(raw ?? "");
  } catch (e) {
    if (e instanceof GrammarError) throw invalidArgument(e.message);
    throw e;
  }
}

/**
 * `source_channel`, the filter of the analytics channel's history and export: a channel name, and
 * only on the analytics channel (`on`), where the copies are — elsewhere it could only ever match
 * nothing, so it is refused rather than silently answered empty. Null when absent. @throws ApiError 400
 */
export function sourceChannelParam(raw: string | undefined, on: ChannelName, config: Settings): ChannelName | null {
  if (raw === undefined) return null;
  if (!isAnalytics(config, on)) {
    throw invalidArgument(`source_channel applies only to the analytics channel ${config.analyticsChannel.name}`);
  }
  try {
    return parseChannelName(raw);
  } catch (e) {
    if (e instanceof GrammarError) throw invalidArgument(`source_channel: ${e.message}`);
    throw e;
  }
}

/** A `within` query parameter (a duration, default 10m) in milliseconds. @throws ApiError 400 */
export function withinParam(value: string | undefined): number {
  try {
    return parseDuration(value ?? "10m");
  } catch (e) {
    if (e instanceof DurationError) throw invalidArgument('within must be a duration such as "10m"');
    throw e;
  }
}

/**
 * The client a per-IP budget is charged to, from `CF-Connecting-IP` (one address, set by Cloudflare;
 * never `X-Forwarded-For`, which clients can write to), or null when the header is absent. An
 * IPv4-mapped IPv6 address counts as its IPv4 address, and any other IPv6 address as its /64: one
 * subscriber usually holds a whole /64, so keying on full addresses would give it 2^64 budgets.
 */
export function clientIp(request: Request): string | null {
  const raw = request.headers.get("cf-connecting-ip")?.trim() ?? "";
  if (raw.length === 0) return null;
  if (!raw.includes(":")) return raw;
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(raw);
  if (mapped) return mapped[1] as string;
  const prefix = ipv6Prefix64(raw);
  return prefix ?? raw;
}

/** The first four groups of an IPv6 address as `a:b:c:d::/64`, or null when it does not parse. */
function ipv6Prefix64(ip: string): string | null {
  const halves = ip.toLowerCase().split("::");
  if (halves.length > 2) return null;
  const groups = (h: string | undefined) => (h ? h.split(":") : []);
  const head = groups(halves[0]);
  const tail = groups(halves[1]);
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  if (!all.every((g) => /^[0-9a-f]{1,4}$/.test(g))) return null;
  return `${all
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}
