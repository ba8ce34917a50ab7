/**
 * A channel's target (docs/throttling.md): the delivered rate the sampler and the fast loop hold, as
 * messages per second or as a delivery budget split across subscribers. One type, one way to write
 * it, one precedence rule ({@link resolveTarget}).
 */
import type { SamplerTarget } from "../../functions/sampler";
import { type ChannelName, type Rule, selectRule } from "../wire/channel-names";
import { LimitError, parseRateShorthand } from "./limits";

/** A target (functions/sampler.ts's `SamplerTarget`) with the text it was written as. */
export type Target = SamplerTarget & { source: string };

/** A target as the API shows and takes it: a shorthand such as "50/s", or {"deliveries": "5000/s"}. */
export type TargetJson = string | { deliveries: string };

/** Parses a target: shorthand (`"100/s"`, messages per second) or `{"deliveries":"5000/s"}`; null: none. */
export function parseTarget(value: unknown): Target | null {
  if (typeof value === "string") {
    const r = parseRateShorthand(value);
    return r ? { kind: "messages", perSecond: (r.rate * 1000) / r.perMs, source: value.trim() } : null;
  }
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const o = value as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1 && keys[0] === "deliveries" && typeof o.deliveries === "string") {
      const r = parseRateShorthand(o.deliveries);
      return r ? { kind: "deliveries", perSecond: (r.rate * 1000) / r.perMs, source: o.deliveries.trim() } : null;
    }
  }
  throw new LimitError('a target must be a shorthand such as "100/s" or {"deliveries":"5000/s"}');
}

/** The target as the API shows it (the inverse of {@link parseTarget}). */
export function targetJson(t: Target): TargetJson;
export function targetJson(t: Target | null): TargetJson | null;
export function targetJson(t: Target | null): TargetJson | null {
  if (!t) return null;
  return t.kind === "messages" ? t.source : { deliveries: t.source };
}

/** What decides a channel's target, besides its name. */
export interface TargetSources {
  /** `THROTTLE_TARGETS`, in selection order. */
  rules: readonly Rule<Target | null>[];
  /** `THROTTLE_TARGET`. */
  fallback: Target | null;
  /** A target set at runtime through the admin API (stored in the registry), if any. */
  runtime?: unknown;
}

/**
 * The one precedence rule: a runtime target (set through the admin API) wins, then the most
 * specific `THROTTLE_TARGETS` pattern, then `THROTTLE_TARGET`. A stored runtime value that no longer
 * parses is ignored (it was validated when set).
 */
export function resolveTarget(channel: ChannelName, sources: TargetSources): Target | null {
  const { runtime } = sources;
  if (runtime !== undefined && runtime !== null) {
    try {
      const t = parseTarget(runtime);
      if (t) return t;
    } catch {
      // fall through to the configuration
    }
  }
  const rule = selectRule(sources.rules, channel);
  return rule ? rule.value : sources.fallback;
}
