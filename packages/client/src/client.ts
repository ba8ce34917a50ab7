/** The client: one session with a server (./session.ts), its publishes, subscriptions and presence. */
import { toError } from "./errors.js";
import type { Message } from "./frames.js";
import type { Manifest } from "./manifest.js";
import type { ClientOptions } from "./options.js";
import { type BroadcastResult, type PublishOptions, type PublishResult, publish } from "./publish.js";
import { Session } from "./session.js";
import { type SubscribeOptions, type Subscription, subscribe } from "./subscribe.js";
import type { TokenPair } from "./tokens.js";

/** `GET /v1/presence/{channel}`: `subjects` only in `announce` mode. */
export interface PresenceAnswer {
  channel: string;
  occupancy: number;
  mode: "announce" | "interval";
  subjects?: string[];
}

export class FloodgateClient {
  private readonly session: Session;

  constructor(opts: ClientOptions) {
    this.session = new Session(opts);
  }

  /** Publishes one JSON value. Resolves with the delivery or the drop; rejects with a FloodgateError. */
  /** A broadcast into every shard (`Floodgate-Shard: *`, a token with the `broadcast` scope). */
  publish(channel: string, data: unknown, options: PublishOptions & { shard: "*" }): Promise<BroadcastResult>;
  publish(channel: string, data: unknown, options?: PublishOptions): Promise<PublishResult>;
  async publish(
    channel: string,
    data: unknown,
    options: PublishOptions = {},
  ): Promise<PublishResult | BroadcastResult> {
    return publish(this.session, channel, data, options);
  }

  /** Exchanges the refresh token for a new pair (a refresh token works once). */
  async refresh(): Promise<TokenPair> {
    return this.session.refresh();
  }

  /** How many are subscribed to `channel` now, and in a small channel who (`GET /v1/presence`). */
  async presence(channel: string): Promise<PresenceAnswer> {
    const session = this.session;
    await session.freshToken().catch(() => {});
    const token = session.accessToken;
    const res = await session.fetchFn(`${session.baseUrl}/v1/presence/${channel}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    if (res.status !== 200) throw await toError(res);
    return (await res.json()) as PresenceAnswer;
  }

  /**
   * The deployment's effective settings (`GET /v1/manifest`, public): budgets, the largest message
   * (`messages.max_bytes`), history kept, session lifetime and the rest, one field per variable.
   */
  async manifest(): Promise<Manifest> {
    const session = this.session;
    const res = await session.fetchFn(`${session.baseUrl}/v1/manifest`);
    if (res.status !== 200) throw await toError(res);
    return (await res.json()) as Manifest;
  }

  /** Subscribes; `onMessage` gets every message once, in seq order, across reconnects. */
  subscribe(channel: string, onMessage: (m: Message) => void, options: SubscribeOptions = {}): Subscription {
    return subscribe(this.session, channel, onMessage, options);
  }
}
