/**
 * The one place tests reach into a channel's object (src/channel/channel-object.ts) past its RPC
 * methods: to move a period back instead of waiting it out, or to read what memory holds. When the
 * object's parts change, only this file follows.
 */

import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { ChannelActivity } from "../../src/channel/activity";
import type { ChannelObject } from "../../src/channel/channel-object";
import type { ChannelFastLoop } from "../../src/channel/fast-loop";
import { MessageLog } from "../../src/channel/messages";
import type { Reservation } from "../../src/channel/relay-registry";
import type { ChannelStore, CounterName, CounterValues } from "../../src/channel/store";
import { channelStub } from "../../src/platform/stubs";
import type { SideFrame } from "../../src/wire/frame-text";
import { storedTables, withFailing } from "./helpers";

/** The parts of the object tests look into (private in the class). */
interface Parts {
  store: ChannelStore;
  fastLoop: ChannelFastLoop;
  activity: ChannelActivity;
  relays: {
    relays: { entries: Map<string, { reservations: Map<string, Reservation> }> };
    sendSide(frames: SideFrame[]): void;
    presenceTick(now: number): void;
  };
  expiry: { lastLeftAt: number };
  summaries: { open: { from: number; due: number; tally: { total: number } } | null };
}

const parts = (instance: ChannelObject | Record<string, unknown>) => instance as unknown as Parts;

/** A counter as the object holds it in memory (0 when never set). */
export function counter(instance: ChannelObject, name: CounterName): number {
  return parts(instance).store.counter(name);
}

/** Sets counters in memory and storage, as the object itself would. */
export function setCounters(instance: ChannelObject, values: CounterValues): void {
  parts(instance).store.set(values);
}

/** Gives the object its channel's name, as the first call that names it would. */
export function rememberChannel(instance: ChannelObject, channel: string): void {
  parts(instance).store.remember(channel);
}

/** The channel's name as the object knows it (also for `withFailing`'s instance filter). */
export function channelOf(instance: ChannelObject | Record<string, unknown>): string | null {
  return parts(instance).store.channel;
}

/** Side frames to every relay of the channel, as the channel's summaries and presence send them. */
export function sendSide(instance: ChannelObject, frames: SideFrame[]): void {
  parts(instance).relays.sendSide(frames);
}

/**
 * Makes the open summary interval due now (src/channel/drop-summaries.ts), so the next alarm ends it;
 * answers its start, or null when no interval is open (no drops counted).
 */
export function makeSummaryDue(instance: ChannelObject): number | null {
  const open = parts(instance).summaries.open;
  if (!open) return null;
  open.due = Date.now();
  return open.from;
}

/** The drops counted in the channel's open summary interval (0 when none is open). */
export function openSummaryDrops(instance: ChannelObject): number {
  return parts(instance).summaries.open?.tally.total ?? 0;
}

/** The channel's alarm as presence sees it, at `now` (its interval frame, its wake-ups of the relays). */
export function presenceTick(instance: ChannelObject, now: number): void {
  parts(instance).relays.presenceTick(now);
}

/** The rate the channel's fast loop holds now. */
export function fastRate(instance: ChannelObject): number {
  return parts(instance).fastLoop.fastRate;
}

/** Makes the object's once-a-minute activity report to the sampler's registry due again. */
export function makeSeenReportDue(instance: ChannelObject): void {
  (parts(instance).activity as unknown as { lastSeenReport: number }).lastSeenReport = 0;
}

/** The reserved slots of every relay of the channel, by reservation id, with their expiry and client. */
export function relayReservations(instance: ChannelObject): Map<string, Reservation>[] {
  return [...parts(instance).relays.relays.entries.values()].map((e) => e.reservations);
}

/**
 * Every slot reserved on `channel`'s relays and connection hosts lapses now, as if its subscriber
 * never came and the reservation's 30 s had passed.
 */
export async function lapseRelayReservations(channel: string): Promise<void> {
  await runInDurableObject(channelStub(env, channel), (o: ChannelObject) => {
    for (const reservations of relayReservations(o))
      for (const [id, r] of reservations) reservations.set(id, { ...r, until: 0 });
  });
}

/**
 * Moves the idle expiry's clock `ms` back — the last publish (or first use) in storage and memory,
 * and when the last subscriber left — as if that much time had passed.
 */
export function backdateIdle(instance: ChannelObject, ms: number): void {
  const p = parts(instance);
  p.store.set({ last_publish_at: p.store.counter("last_publish_at") - ms });
  if (p.expiry.lastLeftAt) p.expiry.lastLeftAt -= ms;
}

/** The shipped `HISTORY_TTL`: a channel nobody published to for this long is deleted by its alarm. */
const HISTORY_TTL_MS = 7 * 24 * 3600 * 1000;

/**
 * The channel's storage deleted by its own idle expiry, so its numbering restarts under a new epoch
 * (docs/api.md, "Numbering restarts"): its last publish moved back past `HISTORY_TTL` in storage,
 * the object evicted so memory reloads it, then its alarm. Throws if anything was left stored.
 */
export async function wipeIdleChannel(channel: string): Promise<void> {
  const stub = channelStub(env, channel);
  await runInDurableObject(stub, (_i, state) => {
    state.storage.sql.exec(
      "UPDATE counters SET value = value - ? WHERE name = 'last_publish_at'",
      HISTORY_TTL_MS + 1000,
    );
  });
  await evictDurableObject(stub);
  if (!(await runDurableObjectAlarm(stub))) throw new Error(`${channel} had no alarm to expire it`);
  const left = await storedTables(stub);
  if (Object.keys(left).length > 0) throw new Error(`${channel} kept ${JSON.stringify(left)} past its idle expiry`);
}

/** Makes every slot reserved on the channel's relays lapse now. */
export function lapseReservations(instance: ChannelObject): void {
  for (const r of relayReservations(instance)) for (const v of r.values()) v.until = Date.now() - 1;
}

/** Starts the channel's current sampling period `ms` ago, instead of waiting that long. */
export async function backdatePeriod(channel: string, ms: number): Promise<void> {
  await runInDurableObject(channelStub(env, channel), (instance) => {
    setCounters(instance, { period_started_at: Date.now() - ms });
  });
}

/**
 * While `run` runs, appending a message to a channel's history throws `message` whenever `when`
 * says so (counted per append, in any channel's object).
 */
export function withFailingAppend<T>(message: string, run: () => Promise<T>, when: () => boolean): Promise<T> {
  return withFailing(MessageLog, "append", message, run, when);
}
