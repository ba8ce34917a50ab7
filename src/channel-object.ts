/**
 * ChannelObject — one Durable Object per channel (SQLite storage). It owns the channel's order and
 * fan-out: assigns sequence numbers, keeps the last `HISTORY_LIMIT` messages for history and resume,
 * remembers `Idempotency-Key`s for 10 minutes, delivers to hibernatable WebSockets and to SSE streams,
 * and counts delivered and dropped messages per sampling period for the sampler.
 *
 * A channel with a target also runs the throttle's fast loop here (docs/throttling.md, "Two loops"):
 * while it is busy or throttled, an alarm every `SAMPLER_FAST_PERIOD` applies the sampler's law
 * (functions/sampler.ts) to the last period, and every answer to a publish or a drop report carries
 * the resulting rate back to the Worker isolate that sent it.
 *
 * The Worker talks to it by RPC (publish, history, stats, …) and forwards subscribe requests with
 * `fetch`, because a WebSocket upgrade has to travel as an HTTP request.
 */
import { DurableObject } from "cloudflare:workers";
import { nextDropRate, roundRate } from "../functions/sampler";
import { samplerRegistry } from "./active-channels";
import { parseChannelName } from "./channels";
import { getConfig, parseTarget, type Target, type TargetJson, targetFor } from "./config";

/** How long an Idempotency-Key is remembered (CONTRACT §4). */
export const IDEMPOTENCY_TTL_MS = 10 * 60 * 1000;
/** Frames an SSE reader may fall behind before its stream is closed, so one slow reader cannot grow memory. */
export const SSE_MAX_BACKLOG = 1024;
/**
 * Bytes a WebSocket subscriber may leave unread (the socket's `bufferedAmount`) before it is closed
 * with {@link SLOW_CONSUMER_CLOSE}: 1 MiB, about 7,000 typical frames or 32 of the largest.
 */
export const WS_MAX_BUFFERED_BYTES = 1024 * 1024;
/** The close code for a WebSocket subscriber that fell too far behind; it may resume with `?after=`. */
export const SLOW_CONSUMER_CLOSE = 4008;
const SLOW_CONSUMER_REASON = "slow consumer: over 1 MiB unread; reconnect with ?after=<last seq received>";
/** `WebSocket.OPEN`. */
const OPEN = 1;

/** What the Worker asks the channel to do with one publish. */
export interface PublishCommand {
  channel: string;
  /** The message as minified JSON text. */
  data: string;
  publisher: string;
  /** The throttle's decision, made in the Worker. */
  action: "deliver" | "drop";
  idempotencyKey?: string;
  now: number;
}

/**
 * The channel's current drop rate from its fast loop, carried to the isolate in every answer; null
 * when the channel has no target (KV's rate rules).
 */
export type ChannelRate = number | null;

/** What {@link ChannelObject.publishMany} answers: one outcome per command, and the current rate. */
export interface PublishManyResult {
  outcomes: PublishOutcome[];
  drop_rate: ChannelRate;
}

export type PublishOutcome =
  | { status: "delivered"; channel: string; seq: number; id: string; published_at: number; replayed: boolean }
  | { status: "dropped"; replayed: boolean };

/** One message for a batch append (analytics copies). */
export interface BatchItem {
  data: string;
  publisher: string;
}

/** Counts for one sampling period, handed to the sampler and then reset. */
export interface PeriodCounts {
  channel: string | null;
  delivered: number;
  dropped: number;
  offered: number;
  elapsed_ms: number;
  period_started_at: number;
  occupancy: number;
  /** The fast loop's current rate, or null when the channel has no fast loop. */
  fast_rate: ChannelRate;
  /** When the fast loop last decided (epoch ms), or null when it never has. */
  fast_decided_at: number | null;
}

export interface ChannelStats {
  channel: string | null;
  occupancy: number;
  websockets: number;
  sse: number;
  last_seq: number;
  delivered_total: number;
  dropped_total: number;
  analytics_copy_failures_total: number;
  /** Subscribers disconnected for falling too far behind (WebSocket and SSE). */
  slow_consumers_closed: number;
  last_sample: unknown;
}

interface SseClient {
  writer: WritableStreamDefaultWriter<Uint8Array>;
  /** Ends the reader's stream cleanly and discards what is still queued for it. */
  terminate: () => void;
  closed: boolean;
}

const encoder = new TextEncoder();

/**
 * Frames in each chunk written to an SSE stream. One chunk carries every frame of a flush, and the
 * runtime moves a stream chunk by chunk, so a frame per chunk could not keep up with a busy channel
 * (every SSE reader fell behind and was cut off at 3,000 publishes/s); the backlog bound still counts
 * frames, through this size.
 */
const sseFrames = new WeakMap<Uint8Array, number>();
const SSE_QUEUE: QueuingStrategy<Uint8Array> = {
  highWaterMark: SSE_MAX_BACKLOG,
  size: (chunk) => sseFrames.get(chunk) ?? 1,
};

/** Events as one chunk for every SSE reader (read-only once written), counted in frames. */
function sseChunk(events: string[]): Uint8Array {
  const bytes = encoder.encode(events.join(""));
  sseFrames.set(bytes, events.length);
  return bytes;
}

type CounterName =
  | "next_seq"
  | "delivered_total"
  | "dropped_total"
  | "copy_failures_total"
  /** Subscribers (WebSocket or SSE) disconnected for falling too far behind. */
  | "slow_consumers_closed"
  | "period_delivered"
  | "period_dropped"
  | "period_started_at"
  /** 1 once this period's traffic is reported to the sampler's registry. */
  | "period_marked"
  /** The fast loop's period: counts, start, when its alarm is due (0: not running), last decision. */
  | "fast_delivered"
  | "fast_dropped"
  | "fast_started_at"
  | "fast_due_at"
  | "fast_decided_at";

export class ChannelObject extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly counters = new Map<CounterName, number>();
  private readonly sse = new Set<SseClient>();
  private channel: string | null = null;
  private lastSample: unknown = null;
  /** An activity report to the sampler's registry in flight (once per period). */
  private marking: Promise<void> | null = null;
  /** The fast loop's current drop rate (stored in `meta` as `fast_rate`). */
  private fastRate = 0;
  /** The target the sampler or the admin API last gave this channel; undefined: never told. */
  private toldTarget: TargetJson | null | undefined = undefined;
  /** An alarm being set for the fast loop, awaited before the RPC that started it answers. */
  private waking: Promise<void> | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    ctx.blockConcurrencyWhile(async () => {
      this.sql.exec(`CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL, data TEXT NOT NULL, publisher TEXT NOT NULL,
        published_at INTEGER NOT NULL)`);
      this.sql.exec(`CREATE TABLE IF NOT EXISTS idempotency (
        key TEXT PRIMARY KEY, result TEXT NOT NULL, expires_at INTEGER NOT NULL)`);
      this.sql.exec("CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (expires_at)");
      this.sql.exec("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)");
      this.sql.exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)");
      for (const row of this.sql.exec<{ name: string; value: number }>("SELECT name, value FROM counters")) {
        this.counters.set(row.name as CounterName, row.value);
      }
      for (const row of this.sql.exec<{ name: string; value: string }>("SELECT name, value FROM meta")) {
        if (row.name === "channel") this.channel = row.value;
        if (row.name === "last_sample") this.lastSample = JSON.parse(row.value);
        if (row.name === "fast_rate") this.fastRate = Number(row.value) || 0;
        if (row.name === "target") this.toldTarget = JSON.parse(row.value) as TargetJson | null;
      }
    });
  }

  // ---- RPC -------------------------------------------------------------------------------------

  /**
   * Delivers or records the drop of each message, honouring its Idempotency-Key: the publishes that
   * reached one Worker isolate together (src/publish-batcher.ts), decided in order in one transaction —
   * one storage commit and one fan-out for all. Each gets exactly the outcome it would have had alone
   * (a key repeated inside the batch answers the first result again).
   */
  async publishMany(cmds: PublishCommand[]): Promise<PublishManyResult> {
    const outcomes: PublishOutcome[] = [];
    this.inBatch(() => {
      for (const cmd of cmds) outcomes.push(this.applyOne(cmd));
      this.trimHistory(this.counter("next_seq"));
    });
    if (outcomes.some((o) => o.status === "delivered" && !o.replayed)) this.flushLive();
    await this.settled(undefined);
    return { outcomes, drop_rate: this.currentRate() };
  }

  private applyOne(cmd: PublishCommand): PublishOutcome {
    this.remember(cmd.channel);
    const idemKey = cmd.idempotencyKey ? `${cmd.publisher}\u0000${cmd.idempotencyKey}` : null;
    if (idemKey) {
      const prior = this.sql
        .exec<{ result: string }>("SELECT result FROM idempotency WHERE key = ? AND expires_at > ?", idemKey, cmd.now)
        .toArray()[0];
      if (prior) return { ...(JSON.parse(prior.result) as PublishOutcome), replayed: true };
    }
    let outcome: PublishOutcome;
    if (cmd.action === "drop") {
      this.bump({ dropped_total: 1, period_dropped: 1 });
      outcome = { status: "dropped", replayed: false };
    } else {
      const m = this.append(cmd.data, cmd.publisher, cmd.now);
      outcome = {
        status: "delivered",
        channel: cmd.channel,
        seq: m.seq,
        id: m.id,
        published_at: cmd.now,
        replayed: false,
      };
    }
    if (idemKey) {
      this.sql.exec("DELETE FROM idempotency WHERE expires_at <= ?", cmd.now);
      const { replayed: _, ...stored } = outcome;
      this.sql.exec(
        "INSERT OR REPLACE INTO idempotency (key, result, expires_at) VALUES (?, ?, ?)",
        idemKey,
        JSON.stringify(stored),
        cmd.now + IDEMPOTENCY_TTL_MS,
      );
    }
    return outcome;
  }

  /** Appends several messages in one call (the analytics channel's copies). Returns the last seq. */
  publishBatch(channel: string, items: BatchItem[], now: number): number {
    this.remember(channel);
    let last = this.counter("next_seq");
    this.inBatch(() => {
      for (const item of items) last = this.append(item.data, item.publisher, now).seq;
      this.trimHistory(last);
    });
    this.flushLive();
    return last;
  }

  /**
   * Counts drops decided in the Worker (no Idempotency-Key), and analytics copies that failed. Answers
   * the current rate: at a high drop rate few publishes reach this object, but every isolate that
   * drops reports here, so each one still hears the rate.
   */
  async recordDrops(channel: string, dropped: number, copyFailures: number): Promise<ChannelRate> {
    this.remember(channel);
    this.bump({ dropped_total: dropped, period_dropped: dropped, copy_failures_total: copyFailures });
    await this.settled(undefined);
    return this.currentRate();
  }

  /** Retained messages as JSON frames, oldest first: after `after`, or the newest `limit`. */
  history(after: number | null, limit: number): string[] {
    const rows =
      after === null
        ? this.sql
            .exec<MessageRow>(
              "SELECT * FROM (SELECT * FROM messages ORDER BY seq DESC LIMIT ?) ORDER BY seq ASC",
              limit,
            )
            .toArray()
        : this.sql
            .exec<MessageRow>("SELECT * FROM messages WHERE seq > ? ORDER BY seq ASC LIMIT ?", after, limit)
            .toArray();
    const channel = this.channel ?? "";
    return rows.map((r) => frame(channel, r));
  }

  stats(): ChannelStats {
    const websockets = this.openSockets().length;
    return {
      channel: this.channel,
      occupancy: websockets + this.sse.size,
      websockets,
      sse: this.sse.size,
      last_seq: this.counter("next_seq"),
      delivered_total: this.counter("delivered_total"),
      dropped_total: this.counter("dropped_total"),
      analytics_copy_failures_total: this.counter("copy_failures_total"),
      slow_consumers_closed: this.counter("slow_consumers_closed"),
      last_sample: this.lastSample,
    };
  }

  /**
   * Returns this period's counts and starts a new period (the sampler calls this once per run). The
   * sampler passes the channel's effective target (a runtime one included), which the fast loop uses
   * from then on.
   */
  takePeriod(now: number, target?: TargetJson | null): PeriodCounts {
    if (target !== undefined) this.setTarget(target);
    const started = this.counter("period_started_at") || now;
    const delivered = this.counter("period_delivered");
    const dropped = this.counter("period_dropped");
    this.set({ period_delivered: 0, period_dropped: 0, period_started_at: now, period_marked: 0 });
    return {
      channel: this.channel,
      delivered,
      dropped,
      offered: delivered + dropped,
      elapsed_ms: Math.max(0, now - started),
      period_started_at: started,
      occupancy: this.occupancy(),
      fast_rate: this.currentRate(),
      fast_decided_at: this.counter("fast_decided_at") || null,
    };
  }

  /**
   * Stores the sampler's latest decision so stats and the admin API can show it. A rate the sweep
   * decided itself (the fast loop had not decided since) becomes the fast loop's rate too, unless the
   * fast loop decided after the sweep began: both loops then answer with the same rate.
   */
  async recordSample(sample: { sampled_at: number; new_rate: number }): Promise<void> {
    this.lastSample = sample;
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('last_sample', ?)", JSON.stringify(sample));
    if (this.fastTarget() && sample.sampled_at >= this.counter("fast_decided_at")) {
      this.setFastRate(sample.new_rate);
      if (sample.new_rate > 0) this.startFastLoop(Date.now());
      await this.settled(undefined);
    }
  }

  /**
   * The channel's target as the sampler or the admin API resolved it (a runtime target included);
   * null: none. Until told, the object uses `THROTTLE_TARGET(S)`.
   */
  setTarget(target: TargetJson | null): void {
    if (JSON.stringify(target) === JSON.stringify(this.toldTarget)) return;
    this.toldTarget = target;
    this.fastTargetCache = undefined;
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('target', ?)", JSON.stringify(target));
  }

  // ---- alarm -------------------------------------------------------------------------------------

  /**
   * One alarm serves every timed job of this object. Each job keeps its own due time in storage,
   * runs only when due (the alarm may have been set earlier for another job), and asks for its next
   * wake-up through {@link wakeBy}, which never moves an earlier alarm later.
   */
  override async alarm(): Promise<void> {
    const now = Date.now();
    await this.fastLoopTick(now);
  }

  /** Sets the alarm to `at` unless one is already set for earlier. */
  private async wakeBy(at: number): Promise<void> {
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > at) await this.ctx.storage.setAlarm(at);
  }

  // ---- fast loop ---------------------------------------------------------------------------------

  /**
   * One fast-loop period ends: the sampler's law on its counts gives the rate the next answers carry.
   * The loop goes on while the channel is busy (any traffic in the period) or throttled, and stops —
   * no alarm at all — once a period passes with no traffic, which also releases the rate to 0.
   */
  private async fastLoopTick(now: number): Promise<void> {
    const due = this.counter("fast_due_at");
    if (!due) return;
    if (now < due) {
      await this.wakeBy(due); // woken early for another job
      return;
    }
    const target = this.fastTarget();
    const delivered = this.counter("fast_delivered");
    const dropped = this.counter("fast_dropped");
    if (!target) {
      this.set({ fast_due_at: 0, fast_delivered: 0, fast_dropped: 0 });
      this.setFastRate(0);
      return;
    }
    const counts = {
      delivered,
      dropped,
      elapsedMs: Math.max(0, now - this.counter("fast_started_at")),
      occupancy: this.occupancy(),
    };
    const next = roundRate(nextDropRate(counts, this.fastRate, target));
    this.setFastRate(next);
    const busy = delivered + dropped > 0;
    const nextDue = busy || next > 0 ? now + getConfig(this.env).samplerFastPeriodMs : 0;
    this.set({ fast_delivered: 0, fast_dropped: 0, fast_started_at: now, fast_due_at: nextDue, fast_decided_at: now });
    if (nextDue) await this.wakeBy(nextDue);
  }

  /** Starts the fast loop's first period at `now` when a channel with a target is not running it yet. */
  private startFastLoop(now: number): void {
    if (!this.fastTarget()) return;
    const period = getConfig(this.env).samplerFastPeriodMs;
    const running = this.counter("fast_due_at");
    let wake: number;
    if (running) {
      // Running, unless its alarm is a whole period overdue (lost): then wake it now, once a period.
      if (now < running + period || now - this.rearmedAt < period) return;
      this.rearmedAt = now;
      wake = now;
    } else {
      wake = now + period;
      this.set({ fast_delivered: 0, fast_dropped: 0, fast_started_at: now, fast_due_at: wake });
    }
    // A failure never fails the publish that started the loop: a lost alarm is re-armed (above).
    const waking: Promise<void> = this.wakeBy(wake)
      .catch((e) => console.error("floodgate: could not set the fast loop's alarm", e instanceof Error ? e.message : e))
      .finally(() => {
        if (this.waking === waking) this.waking = null;
      });
    this.waking = waking;
  }

  /** When a lost fast-loop alarm was last re-armed (epoch ms). */
  private rearmedAt = 0;

  /** The rate answers carry: the fast loop's, or null for a channel without one. */
  private currentRate(): ChannelRate {
    return this.fastTarget() ? this.fastRate : null;
  }

  private setFastRate(rate: number): void {
    if (rate === this.fastRate) return;
    this.fastRate = rate;
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('fast_rate', ?)", String(rate));
  }

  /** The fast loop's target in messages per second; undefined until computed. */
  private fastTargetCache: { kind: Target["kind"]; perSecond: number } | null | undefined = undefined;

  /** The target the fast loop holds: the one the sampler or admin API gave, else the configured one. */
  private fastTarget(): { kind: Target["kind"]; perSecond: number } | null {
    if (this.fastTargetCache !== undefined) return this.fastTargetCache;
    const channel = this.channel;
    if (!channel) return null; // not known yet: decide once it is
    let target: Target | null = null;
    try {
      const config = getConfig(this.env);
      if (channel !== config.analyticsChannel.name) {
        target =
          this.toldTarget !== undefined ? parseTarget(this.toldTarget) : targetFor(config, parseChannelName(channel));
      }
    } catch {
      target = null; // bad config, or a name that is not a channel: no fast loop
    }
    this.fastTargetCache = target ? { kind: target.kind, perSecond: target.perSecond } : null;
    return this.fastTargetCache;
  }

  private occupancy(): number {
    return this.openSockets().length + this.sse.size;
  }

  // ---- subscribe (fetch) -------------------------------------------------------------------------

  /** Subscribe: `GET /subscribe?channel=…&mode=ws|sse&after=<seq>`, already authorised by the Worker. */
  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const channel = url.searchParams.get("channel") ?? "";
    this.remember(channel);
    const afterText = url.searchParams.get("after");
    const after = afterText === null ? null : Number(afterText);
    if (url.searchParams.get("mode") === "ws") {
      const pair = new WebSocketPair();
      const [client, server] = [pair[0], pair[1]];
      this.ctx.acceptWebSocket(server);
      server.serializeAttachment({ connected_at: Date.now() });
      // Replay and go live in one synchronous step: no publish can run in between, so nothing is
      // skipped or repeated.
      if (after !== null) for (const f of this.replayFrames(after)) server.send(f.text);
      return new Response(null, { status: 101, webSocket: client });
    }
    // Backlog is counted on the writable side, in frames (SSE_QUEUE): desiredSize goes to 0 once the
    // reader is SSE_MAX_BACKLOG frames behind.
    let terminate = () => {};
    const stream = new TransformStream<Uint8Array, Uint8Array>(
      {
        start(controller) {
          terminate = () => controller.terminate();
        },
      },
      SSE_QUEUE,
    );
    const client: SseClient = { writer: stream.writable.getWriter(), terminate, closed: false };
    this.writeSse(client, sseChunk([": subscribed\nretry: 1000\n\n"]));
    if (after !== null) {
      const replay = this.replayFrames(after);
      if (replay.length > 0) this.writeSse(client, sseChunk(replay.map(sseEvent)));
    }
    this.sse.add(client);
    client.writer.closed.then(
      () => this.dropSse(client),
      () => this.dropSse(client),
    );
    return new Response(stream.readable, {
      headers: {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache, no-transform",
        "x-accel-buffering": "no",
      },
    });
  }

  /** Frames a subscriber sends are ignored; they are never published (CONTRACT §10). */
  override webSocketMessage(_ws: WebSocket, _message: string | ArrayBuffer): void {}

  override webSocketClose(ws: WebSocket, code: number, _reason: string, _wasClean: boolean): void {
    try {
      ws.close(code === 1005 || code === 1006 ? 1000 : code, "closing");
    } catch {
      // already closed
    }
  }

  override webSocketError(ws: WebSocket, _error: unknown): void {
    try {
      ws.close(1011, "error");
    } catch {
      // already closed
    }
  }

  // ---- internals ---------------------------------------------------------------------------------

  /** Messages appended by the current transaction, sent live once it commits. */
  private pendingLive: MessageFields[] = [];
  /** Inside {@link inBatch}: counters changed but not yet written. */
  private deferred: Set<CounterName> | null = null;

  /** Appends one message; the batch around it trims history once, at its end. */
  private append(data: string, publisher: string, now: number): { seq: number; id: string } {
    const seq = this.counter("next_seq") + 1;
    const id = crypto.randomUUID();
    this.sql.exec(
      "INSERT INTO messages (seq, id, data, publisher, published_at) VALUES (?, ?, ?, ?, ?)",
      seq,
      id,
      data,
      publisher,
      now,
    );
    this.bump({ next_seq: 1, delivered_total: 1, period_delivered: 1 });
    this.pendingLive.push({ seq, id, data, published_at: now });
    return { seq, id };
  }

  /**
   * Runs `fn` in one transaction with counter writes gathered into one statement at its end: a batch
   * of 100 messages would otherwise write the counters 100 times.
   */
  private inBatch(fn: () => void): void {
    this.ctx.storage.transactionSync(() => {
      const dirty = new Set<CounterName>();
      this.deferred = dirty;
      try {
        fn();
      } finally {
        this.deferred = null;
      }
      this.set(Object.fromEntries([...dirty].map((k) => [k, this.counter(k)])));
    });
  }

  private trimHistory(lastSeq: number): void {
    const limit = getConfig(this.env).historyLimit;
    if (lastSeq > limit) this.sql.exec("DELETE FROM messages WHERE seq <= ?", lastSeq - limit);
  }

  /** Sends messages appended by the last transaction to every live subscriber. */
  private flushLive(): void {
    const messages = this.pendingLive;
    this.pendingLive = [];
    if (messages.length === 0) return;
    const sockets = this.openSockets();
    // No one listening (the analytics channel, usually): no frames to build.
    if (sockets.length === 0 && this.sse.size === 0) return;
    const frames = this.liveFrames(messages);
    let slow = 0;
    for (const ws of sockets) {
      try {
        for (const f of frames) ws.send(f.text);
        // Unread bytes past the bound: stop sending and close, so one stalled reader can hold at
        // most the bound plus one batch, and never slows the others (sends do not block).
        if (ws.bufferedAmount > WS_MAX_BUFFERED_BYTES) {
          slow++;
          ws.close(SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON);
        }
      } catch {
        // A socket whose send fails is dropped without disturbing the others.
        try {
          ws.close(1011, "send failed");
        } catch {
          // already gone
        }
      }
    }
    if (this.sse.size > 0) {
      const chunk = sseChunk(frames.map(sseEvent));
      for (const client of this.sse) if (!this.writeSse(client, chunk)) slow++;
    }
    if (slow > 0) this.bump({ slow_consumers_closed: slow });
  }

  /**
   * Sockets still open: one this object closed stays listed until its peer answers the close, which
   * a stalled reader never does, so it must not count as a subscriber nor be sent to.
   */
  private openSockets(): WebSocket[] {
    return this.ctx.getWebSockets().filter((ws) => ws.readyState === OPEN);
  }

  private replayFrames(after: number): LiveFrame[] {
    return this.liveFrames(
      this.sql.exec<MessageRow>("SELECT * FROM messages WHERE seq > ? ORDER BY seq ASC", after).toArray(),
    );
  }

  /** Wire frames for messages of this channel, with their seq (SSE uses it as the event id). */
  private liveFrames(messages: MessageFields[]): LiveFrame[] {
    const channel = this.channel ?? "";
    return messages.map((m) => ({ seq: m.seq, text: frame(channel, m) }));
  }

  /** Writes one chunk of events; false when this write found the reader too far behind and closed it. */
  private writeSse(client: SseClient, chunk: Uint8Array): boolean {
    if (client.closed) return true;
    const backlog = client.writer.desiredSize;
    if (backlog !== null && backlog <= 0) {
      // The reader fell SSE_MAX_BACKLOG frames behind: close it rather than buffer without bound.
      this.dropSse(client, true);
      return false;
    }
    client.writer.write(chunk).catch(() => this.dropSse(client));
    return true;
  }

  private dropSse(client: SseClient, abort = false): void {
    if (client.closed) return;
    client.closed = true;
    this.sse.delete(client);
    // A clean end (the client reconnects with Last-Event-ID), not an error: aborting the stream made
    // workerd log an uncaught exception for every reader cut off. The queued backlog is discarded.
    if (abort) client.terminate();
  }

  private remember(channel: string): void {
    if (this.channel === null && channel) {
      this.channel = channel;
      this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('channel', ?)", channel);
    }
  }

  private counter(name: CounterName): number {
    return this.counters.get(name) ?? 0;
  }

  private bump(deltas: Partial<Record<CounterName, number>>): void {
    const next: Partial<Record<CounterName, number>> = {};
    for (const [k, d] of Object.entries(deltas) as [CounterName, number][]) {
      if (d) next[k] = this.counter(k) + d;
    }
    const traffic = (deltas.period_delivered ?? 0) + (deltas.period_dropped ?? 0);
    if (traffic) {
      this.startFastLoop(Date.now());
      if (this.counter("fast_due_at")) {
        next.fast_delivered = this.counter("fast_delivered") + (deltas.period_delivered ?? 0);
        next.fast_dropped = this.counter("fast_dropped") + (deltas.period_dropped ?? 0);
      }
    }
    if (traffic && !this.counter("period_marked")) {
      if (!this.counter("period_started_at")) next.period_started_at = Date.now();
      this.set(next);
      this.markActive();
      return;
    }
    this.set(next);
  }

  /**
   * Reports the first traffic of a period to the sampler's registry, once per period and only for a
   * channel the sampler manages (one with a target; never the analytics channel). The RPC that
   * counted the traffic waits for it (see {@link settled}) so the report is never cut off; a
   * registry failure is logged and retried on the next message, and never fails a publish.
   */
  private markActive(): void {
    const channel = this.channel;
    if (!channel) return;
    if (!this.sampled(channel)) {
      this.reportSeen(channel);
      return;
    }
    this.set({ period_marked: 1 });
    const registry = samplerRegistry(this.env);
    this.marking = registry.markActive(channel).then(
      (lastRunAt) => {
        // A channel idle through earlier runs starts its period at the last run, not long before.
        if (lastRunAt && lastRunAt > this.counter("period_started_at")) this.set({ period_started_at: lastRunAt });
        this.marking = null;
      },
      (e) => {
        console.error(
          "floodgate: could not report channel activity to the sampler",
          e instanceof Error ? e.message : e,
        );
        this.set({ period_marked: 0 });
        this.marking = null;
      },
    );
  }

  /** When this object last told the registry it had traffic (channels the sampler does not visit). */
  private lastSeenReport = 0;

  /** At most once a minute: lets the dashboard list channels without a target too. */
  private reportSeen(channel: string): void {
    const now = Date.now();
    if (now - this.lastSeenReport < 60_000 || channel === getConfig(this.env).analyticsChannel.name) return;
    this.lastSeenReport = now;
    const registry = samplerRegistry(this.env);
    this.marking = registry.markSeen(channel, now).then(
      () => {
        this.marking = null;
      },
      () => {
        this.lastSeenReport = 0;
        this.marking = null;
      },
    );
  }

  /** Returns `value` once any activity report or fast-loop alarm this call started has been made. */
  private async settled<T>(value: T): Promise<T> {
    if (this.marking) await this.marking;
    if (this.waking) await this.waking;
    return value;
  }

  /** Whether the sampler manages this channel; fixed for the object's life (config is per isolate). */
  private sampledCache: boolean | null = null;

  private sampled(channel: string): boolean {
    this.sampledCache ??= this.computeSampled(channel);
    return this.sampledCache;
  }

  private computeSampled(channel: string): boolean {
    try {
      const config = getConfig(this.env);
      if (channel === config.analyticsChannel.name) return false;
      return targetFor(config, parseChannelName(channel)) !== null;
    } catch {
      return false; // bad config or a name that is not a channel: nothing to sample
    }
  }

  private set(values: Partial<Record<CounterName, number>>): void {
    const entries = Object.entries(values) as [CounterName, number][];
    if (entries.length === 0) return;
    for (const [k, v] of entries) this.counters.set(k, v);
    if (this.deferred) {
      for (const [k] of entries) this.deferred.add(k);
      return;
    }
    // One statement for all of them: a publish updates three counters, and each statement costs.
    this.sql.exec(
      `INSERT OR REPLACE INTO counters (name, value) VALUES ${entries.map(() => "(?, ?)").join(", ")}`,
      ...entries.flat(),
    );
  }
}

interface MessageRow {
  [key: string]: SqlStorageValue;
  seq: number;
  id: string;
  data: string;
  publisher: string;
  published_at: number;
}

/** The wire frame (CONTRACT §5), built as text so the payload is never parsed again. */
function frame(channel: string, r: MessageFields): string {
  return `{"type":"message","channel":${JSON.stringify(channel)},"seq":${r.seq},"id":${JSON.stringify(r.id)},"data":${r.data},"published_at":${r.published_at}}`;
}

interface LiveFrame {
  seq: number;
  text: string;
}

type MessageFields = Pick<MessageRow, "seq" | "id" | "data" | "published_at">;

/** One SSE `message` event; the frame is single-line JSON, so one `data:` line carries it. */
function sseEvent(f: LiveFrame): string {
  return `id: ${f.seq}\nevent: message\ndata: ${f.text}\n\n`;
}
