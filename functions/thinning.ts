/**
 * Deterministic thinning: the low-variance alternative to a random drop.
 *
 * Error diffusion per channel: each message adds the pass fraction (1 − drop rate) to a credit, and a
 * message passes when the credit reaches 1 (which then pays 1). Over any run of n messages the number
 * passed differs from n·(1 − p) by less than one, so per-period noise in the delivered count comes
 * only from the traffic itself, not from coin flips (about 3× less at T·τ = 600; see docs/throttling.md).
 *
 * The cost: the pattern is regular. A publisher that sends at a fixed phase (every k-th message is
 * important) could be systematically passed or dropped, and anyone who can count can predict the next
 * decision. Random drops are the default for that reason; use thinning for telemetry-like channels
 * (reactions, metrics) where a steady rate matters more than unpredictability.
 *
 * One instance per isolate: each isolate thins its own share of the traffic, which keeps each share —
 * and so their sum — exact to within one message per isolate.
 */
import { BoundedMap } from "./bounded-map";

/** Channels whose credit one isolate keeps; past it the least recently thinned channel starts over. */
const MAX_CHANNELS = 10_000;

export class Thinning {
  private readonly credit: BoundedMap<string, number>;

  constructor(maxChannels = MAX_CHANNELS) {
    this.credit = new BoundedMap(maxChannels);
  }

  /** Whether to drop the next message of `channel` at drop rate `rate`. */
  drop(channel: string, rate: number): boolean {
    const pass = rate > 0 ? Math.max(0, 1 - Math.min(rate, 1)) : 1;
    // Start half-way, so the first decision rounds to the nearest instead of always dropping.
    const credit = (this.credit.get(channel) ?? 0.5) + pass;
    if (credit >= 1) {
      this.credit.set(channel, credit - 1);
      return false;
    }
    this.credit.set(channel, credit);
    return true;
  }
}
