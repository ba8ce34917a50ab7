/**
 * The channel's line to one relay (src/channel/relay-pipe.ts), with a recorded send in place of the relay: one
 * call at a time in order, batches queued behind a call go as one, the queue is bounded in bytes (the
 * oldest go and the head tells the relay to repair), and a failed call is followed by head-only calls
 * after a growing, capped backoff (fake timers) until one gets through, however long that takes.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  PIPE_QUICK_GAP_MS,
  PIPE_QUICK_RETRIES,
  PIPE_RETRY_BASE_MS,
  PIPE_RETRY_MAX_MS,
  PIPE_SIDE_MAX_BYTES,
  PipeBudget,
  RelayPipe,
} from "../../src/channel/relay-pipe";
import type { LiveFrame, SideFrame } from "../../src/wire/frame-text";

const f = (seq: number, text = `m${seq}`): LiveFrame => ({ seq, text });

/** A send that records each call and stays in flight until settled by the test. */
function recorder() {
  const calls: { seqs: number[]; head: number; side: string[]; settle: (ok: boolean) => void }[] = [];
  const send = (frames: LiveFrame[], head: number, side: SideFrame[] = []) =>
    new Promise<void>((resolve, reject) => {
      calls.push({
        seqs: frames.map((x) => x.seq),
        head,
        side: side.map((x) => x.text),
        settle: (ok) => (ok ? resolve() : reject(new Error("relay failed"))),
      });
    });
  return { calls, send };
}

/** Lets the promise callbacks of a settled call run. */
const turn = () => new Promise<void>((r) => queueMicrotask(r)).then(() => Promise.resolve());

describe("relay pipe", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("sends one call at a time, in order, and coalesces what queued behind a call into one", async () => {
    const { calls, send } = recorder();
    const pipe = new RelayPipe(send, 1024);
    pipe.push([f(1)], 1);
    pipe.push([f(2)], 2);
    pipe.push([f(3), f(4)], 4);
    expect(calls.map((c) => c.seqs)).toEqual([[1]]);
    calls[0]?.settle(true);
    await turn();
    expect(calls.map((c) => [c.seqs, c.head])).toEqual([
      [[1], 1],
      [[2, 3, 4], 4],
    ]);
    expect(pipe.sent).toBe(2);
  });

  it("lets the oldest queued frames go past its byte bound, keeping the newest and the head", async () => {
    const { calls, send } = recorder();
    const pipe = new RelayPipe(send, 10);
    pipe.push([f(1, "xxxx")], 1);
    for (let s = 2; s <= 6; s++) pipe.push([f(s, "xxxx")], s); // 20 bytes queued behind the call
    calls[0]?.settle(true);
    await turn();
    // 2..4 were let go: the relay sees the gap before 5 and fetches it from history.
    expect(calls[1]).toMatchObject({ seqs: [5, 6], head: 6 });
  });

  it("after a failed call, retries with the head only after a backoff, until a call gets through", async () => {
    const { calls, send } = recorder();
    const pipe = new RelayPipe(send, 1024);
    pipe.push([f(1)], 1);
    calls[0]?.settle(false);
    await turn();
    expect(calls).toHaveLength(1); // nothing at once
    await vi.advanceTimersByTimeAsync(PIPE_RETRY_BASE_MS);
    expect(calls[1]).toMatchObject({ seqs: [], head: 1 });
    calls[1]?.settle(false);
    await turn();
    await vi.advanceTimersByTimeAsync(PIPE_RETRY_BASE_MS); // the second waits twice as long
    expect(calls).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(PIPE_RETRY_BASE_MS);
    expect(calls[2]).toMatchObject({ seqs: [], head: 1 });
    calls[2]?.settle(true);
    await turn();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(calls).toHaveLength(3);
  });

  it("never gives up on a quiet channel: retries go on, at most PIPE_RETRY_MAX_MS apart, until one gets through", async () => {
    const { calls, send } = recorder();
    const pipe = new RelayPipe(send, 1024);
    pipe.push([f(1)], 1);
    // Twenty failed calls in a row (several minutes of a relay that cannot be reached).
    for (let i = 0; i < 20; i++) {
      calls[i]?.settle(false);
      await turn();
      await vi.advanceTimersByTimeAsync(PIPE_RETRY_MAX_MS);
      expect(calls).toHaveLength(i + 2);
      expect(calls[i + 1]).toMatchObject({ seqs: [], head: 1 });
    }
    calls[20]?.settle(true);
    await turn();
    await vi.advanceTimersByTimeAsync(10 * PIPE_RETRY_MAX_MS);
    expect(calls).toHaveLength(21);
  });

  it(`after ${PIPE_QUICK_RETRIES} failed retries a new batch cuts the backoff short, at most once per PIPE_QUICK_GAP_MS`, async () => {
    const { calls, send } = recorder();
    const pipe = new RelayPipe(send, 1024);
    pipe.push([f(1)], 1);
    for (let i = 0; i <= PIPE_QUICK_RETRIES; i++) {
      calls[i]?.settle(false);
      await turn();
      await vi.advanceTimersByTimeAsync(Math.min(PIPE_RETRY_MAX_MS, PIPE_RETRY_BASE_MS * 2 ** i));
    }
    calls.at(-1)?.settle(false);
    await turn();
    // The backoff is now 6.4 s; a batch PIPE_QUICK_GAP_MS after the last call goes at once.
    await vi.advanceTimersByTimeAsync(PIPE_QUICK_GAP_MS);
    const before = calls.length;
    pipe.push([f(2)], 2);
    expect(calls).toHaveLength(before + 1);
    expect(calls.at(-1)).toMatchObject({ seqs: [2], head: 2 });
    // It fails too: publishes right after it wait (a failing relay is not called once per publish).
    calls.at(-1)?.settle(false);
    await turn();
    for (let s = 3; s <= 50; s++) pipe.push([f(s)], s);
    expect(calls).toHaveLength(before + 1);
    await vi.advanceTimersByTimeAsync(PIPE_QUICK_GAP_MS);
    pipe.push([f(51)], 51);
    expect(calls).toHaveLength(before + 2);
    expect(calls.at(-1)?.head).toBe(51);
  });

  it("a stopped line sends nothing more", async () => {
    const { calls, send } = recorder();
    const pipe = new RelayPipe(send, 1024);
    pipe.push([f(1)], 1);
    calls[0]?.settle(false);
    pipe.stop();
    await turn();
    await vi.advanceTimersByTimeAsync(60_000);
    pipe.push([f(2)], 2);
    expect(calls).toHaveLength(1);
  });

  it("side frames ride the line after the frames queued before them, bounded in bytes, and a failed call's are not sent again", async () => {
    const { calls, send } = recorder();
    const pipe = new RelayPipe(send, 1024);
    const side = (text: string): SideFrame => ({ event: "summary", text });
    pipe.pushSide([side("s0")]);
    expect(calls.map((c) => [c.seqs, c.side])).toEqual([[[], ["s0"]]]);
    pipe.push([f(1)], 1);
    pipe.pushSide([side("s1")]);
    calls[0]?.settle(true);
    await turn();
    // What queued behind the call goes as one: the message, then the side frame.
    expect(calls[1]).toMatchObject({ seqs: [1], side: ["s1"] });
    // Past the bound the oldest side frames go, the newest stays.
    const big = "x".repeat(PIPE_SIDE_MAX_BYTES / 2);
    pipe.pushSide([side(`a${big}`), side(`b${big}`), side(`c${big}`)]);
    calls[1]?.settle(false);
    await turn();
    vi.advanceTimersByTime(PIPE_RETRY_BASE_MS);
    // The failed call's side frames are not sent again; the queued ones (bounded) are.
    expect(calls[2]?.side.map((t) => t[0])).toEqual(["c"]);
    calls[2]?.settle(true);
    await turn();
    expect(calls).toHaveLength(3);
  });

  it("all of a channel's lines together stay under their byte bound: the line holding the most lets go first, counted and repaired", async () => {
    let shed = 0;
    const budget = new PipeBudget(40, (n) => {
      shed += n;
    });
    const stalled = recorder();
    const fast = recorder();
    const a = new RelayPipe(stalled.send, 1024, budget);
    const b = new RelayPipe(fast.send, 1024, budget);
    // Each line's first call is on its way: counted until answered.
    a.push([f(1, "xxxx")], 1);
    b.push([f(1, "xxxx")], 1);
    expect(budget.bytes).toBe(8);
    fast.calls[0]?.settle(true);
    await turn();
    expect(budget.bytes).toBe(4);
    // The fast relay answers every call at once; the stalled one never does, so its queue grows.
    for (let s = 2; s <= 30; s++) {
      a.push([f(s, "xxxx")], s);
      b.push([f(s, "xxxx")], s);
      fast.calls.at(-1)?.settle(true);
      await turn();
      expect(budget.bytes).toBeLessThanOrEqual(40);
    }
    // Only the stalled line let frames go; the fast one got every frame.
    expect(shed).toBeGreaterThan(0);
    expect(fast.calls.flatMap((c) => c.seqs)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    stalled.calls[0]?.settle(true);
    await turn();
    // The stalled relay's next call has the newest frames and the head: it fetches the hole from history.
    const next = stalled.calls[1];
    expect(next?.head).toBe(30);
    expect(next?.seqs.at(-1)).toBe(30);
    expect(next?.seqs[0]).toBeGreaterThan(2);
    expect(shed).toBe(30 - 1 - (next?.seqs.length ?? 0));
    // A line that stops gives back what it held.
    next?.settle(true);
    await turn();
    a.push([f(31, "xxxx")], 31);
    a.stop();
    b.stop();
    expect(budget.bytes).toBe(0);
  });

  it("frames a line lets go past its own bound are counted too", async () => {
    let shed = 0;
    const { calls, send } = recorder();
    const pipe = new RelayPipe(
      send,
      10,
      new PipeBudget(Number.POSITIVE_INFINITY, (n) => {
        shed += n;
      }),
    );
    for (let s = 1; s <= 6; s++) pipe.push([f(s, "xxxx")], s);
    expect(shed).toBe(3); // 2..4 went: 5, 6 are queued behind the call of 1
    calls[0]?.settle(true);
    await turn();
    expect(calls[1]).toMatchObject({ seqs: [5, 6], head: 6 });
  });
});
