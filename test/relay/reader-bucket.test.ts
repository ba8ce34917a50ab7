/**
 * A thinned subscriber's bucket (src/relay/reader-bucket.ts; docs/api.md, "Each reader's rate"):
 * priority messages are always delivered and take budget when there is some and never more, so a
 * priority message sent with an empty bucket leaves no debt, and the next message goes exactly when
 * a message's room has refilled. Pure: the test's clock is the `now` it passes.
 */
import { describe, expect, it } from "vitest";
import { ReaderBucket } from "../../src/relay/reader-bucket";

const ONE_PER_SECOND = { n: 1, perMs: 1000 };
const t0 = 1_700_000_000_000;

/** A bucket at `rate` from `t0`, full. */
function bucketAt(rate: { n: number; perMs: number }): ReaderBucket {
  const b = new ReaderBucket(t0);
  b.setRate(rate);
  return b;
}

describe("a reader's bucket and priority messages", () => {
  it("a priority message with the bucket empty leaves it empty, not in debt: the next message goes a refill later", () => {
    const b = bucketAt(ONE_PER_SECOND);
    expect(b.has()).toBe(true);
    b.take(); // a normal message: the one message of its burst
    expect(b.has()).toBe(false);
    b.take(); // a priority message: delivered with no room, and takes nothing it does not have
    expect(b.readyAt()).toBe(t0 + 1000);
    b.refill(t0 + 999);
    expect(b.has()).toBe(false);
    b.refill(t0 + 1000);
    expect(b.has()).toBe(true);
  });

  it("a priority message takes the room there is, never more: a partly refilled bucket is emptied", () => {
    const b = bucketAt(ONE_PER_SECOND);
    b.take();
    b.refill(t0 + 400); // four tenths of a message's room
    b.take(); // priority: takes those four tenths
    expect(b.readyAt()).toBe(t0 + 1400);
    b.refill(t0 + 1399);
    expect(b.has()).toBe(false);
    b.refill(t0 + 1400);
    expect(b.has()).toBe(true);
  });

  it("at 5/s, priority messages past an empty burst leave the next message due a fifth of a second later", () => {
    const b = bucketAt({ n: 5, perMs: 1000 });
    for (let i = 0; i < 5; i++) {
      expect(b.has()).toBe(true);
      b.take();
    }
    for (let i = 0; i < 10; i++) b.take(); // ten priority messages over an empty bucket
    expect(b.readyAt()).toBe(t0 + 200);
    b.refill(t0 + 199);
    expect(b.has()).toBe(false);
    b.refill(t0 + 200);
    expect(b.has()).toBe(true);
  });
});
