/**
 * Every Durable Object stub the Worker builds, in one place: which binding, and which name each
 * object is found by.
 *
 * A stub belongs to the request that built it, so none is kept; ids are plain values, so they are
 * (see {@link objectId}). A channel call that counts as traffic goes through src/worker/services.ts's
 * `countedChannelStub`, which counts it in `floodgate_object_calls_total` and builds it here.
 */
import { BoundedMap } from "../../functions/bounded-map";

/**
 * `idFromName` hashes the name on every call; an id is a plain value, so it is kept per isolate
 * and namespace (the least recently used go first past 10,000 names).
 */
const ids = new WeakMap<object, BoundedMap<string, DurableObjectId>>();
export function objectId(ns: { idFromName(name: string): DurableObjectId }, name: string): DurableObjectId {
  let m = ids.get(ns);
  if (!m) {
    m = new BoundedMap(10_000);
    ids.set(ns, m);
  }
  return m.getOrSet(name, () => ns.idFromName(name));
}

/** A channel's object (messages, history, fan-out), by channel name. Not counted as a call. */
export function channelStub(env: Env, channel: string) {
  return env.CHANNEL.get(objectId(env.CHANNEL, channel));
}

/**
 * The name the one `ActiveChannels` object is found by. It was named for its first user, the
 * sampler; the object's id and so its stored state derive from this name, so it stays.
 */
export const ACTIVE_CHANNELS_OBJECT = "sampler";

/** The one `ActiveChannels` object: which channels the sampler visits, runtime targets, recently seen channels. */
export function activeChannelsStub(env: Env) {
  return env.ACTIVE_CHANNELS.get(objectId(env.ACTIVE_CHANNELS, ACTIVE_CHANNELS_OBJECT));
}

/** The name of the one metrics object. */
export const METRICS_OBJECT = "metrics";

/** The one `MetricsStore` object: the deployment's counters for /metrics. */
export function metricsStub(env: Env) {
  return env.METRICS.get(objectId(env.METRICS, METRICS_OBJECT));
}

/** A subject's `RefreshLedger` object: its sessions' spent and revoked refresh tokens. */
export function refreshLedgerStub(env: Env, subject: string) {
  return env.REFRESH_LEDGER.get(objectId(env.REFRESH_LEDGER, subject));
}

/** A client's `ConnectionLedger` (its connections over all channels), by client key (src/channel/client-cap.ts). */
export function connectionLedgerStub(env: Env, client: string) {
  return env.CONNECTION_LEDGER.get(objectId(env.CONNECTION_LEDGER, client));
}

/**
 * The name of the `RefreshLedger` instance that lists revoked sessions: never a subject's, since
 * subjects never hold `#` (the mint's `sub` rule).
 */
export const REVOKED_SESSIONS_LEDGER = "#revoked-sessions";

/** The one `RefreshLedger` instance that lists revoked sessions (src/refresh-ledger/revoked-sessions.ts). */
export function revokedSessionsStub(env: Env) {
  return env.REFRESH_LEDGER.get(objectId(env.REFRESH_LEDGER, REVOKED_SESSIONS_LEDGER));
}

/** A relay of a channel, by relay name (src/relay/placement.ts names them). */
export function relayStub(env: Env, relay: string) {
  return env.RELAY.get(objectId(env.RELAY, relay));
}

/** A connection host of Pusher connections, by host name (src/connection-host/naming.ts names them). */
export function connectionHostStub(env: Env, host: string) {
  return env.CONNECTION_HOST.get(objectId(env.CONNECTION_HOST, host));
}

/** A placement group's directory of connection hosts (src/host-directory/host-directory.ts), by its name. */
export function hostDirectoryStub(env: Env, directory: string) {
  return env.HOST_DIRECTORY.get(objectId(env.HOST_DIRECTORY, directory));
}

/** A rate-limit shard's `LimiterShard` object (the buckets of every key hashed to it), by shard name. */
export function limiterShardStub(env: Env, shard: string) {
  return env.LIMITER_SHARD.get(objectId(env.LIMITER_SHARD, shard));
}
