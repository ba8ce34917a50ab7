/**
 * Which bucket a request is charged to, and under which limit (docs/api.md: Publish, Subscribe, Tokens, Bounds).
 * Pure.
 */

import type { LimitJson } from "../settings/limits";
import { type Limit, LimitError, parseLimit } from "../settings/limits";
import type { Settings } from "../settings/settings";
import { type ChannelName, selectRule } from "../wire/channel-names";

export interface Budget {
  key: string;
  limit: Limit | null;
}

/**
 * Publish: key `publish-channel:<pattern>:<sub>` when a per-channel rule matches, else `publish:<sub>`;
 * limit: the token's `rl` override, else the rule, else the default.
 */
export function publishBudget(config: Settings, channel: ChannelName, sub: string, override?: LimitJson): Budget {
  const rule = selectRule(config.perChannelPublish, channel);
  const key = rule ? `publish-channel:${rule.pattern.source}:${sub}` : `publish:${sub}`;
  let limit = rule ? rule.value : config.publish;
  if (override) {
    try {
      limit = parseLimit(override);
    } catch (e) {
      // A signed token carries only limits we validated when minting; a bad one is treated as absent.
      if (!(e instanceof LimitError)) throw e;
    }
  }
  return { key, limit };
}

/**
 * Subscribe: keyed by the `sub` of a verified token (never a claimed one, so nobody can spend or read
 * another subject's budget); no per-token override applies.
 */
export function subscribeBudget(config: Settings, channel: ChannelName, sub: string): Budget {
  const rule = selectRule(config.perChannelSubscribe, channel);
  return rule
    ? { key: `subscribe-channel:${rule.pattern.source}:${sub}`, limit: rule.value }
    : { key: `subscribe:${sub}`, limit: config.subscribe };
}

const ipKey = (ip: string | null) => (ip && ip.length > 0 ? ip : "unknown");

/** Token mint and refresh: keyed by client IP; `unknown` when the header is absent. */
export function tokenIssueBudget(config: Settings, ip: string | null): Budget {
  return { key: `token-issue:${ipKey(ip)}`, limit: config.tokenIssue };
}

/** Reads (every history request, subscribes without a verified token): keyed by client IP like token issue. */
export function readBudget(config: Settings, ip: string | null): Budget {
  return { key: `read:${ipKey(ip)}`, limit: config.read };
}

/**
 * Failed admin authentications (admin routes, `/metrics`, minting): keyed by client IP, charged only
 * when the bearer was wrong, so guessing `ADMIN_TOKEN` is budgeted while the operator never is.
 */
export function adminAuthBudget(config: Settings, ip: string | null): Budget {
  return { key: `admin-auth:${ipKey(ip)}`, limit: config.adminAuth };
}
