/**
 * A thinned subscriber's bucket (./reader.ts) in whole numbers, so that a rate of 1/s lets one
 * message through every 1,000 ms exactly however the time between messages is cut: a message costs
 * `perMs` units and each millisecond adds `n` (its rate is `n` per `perMs`); it holds one second's
 * worth, and at least one message. Without a rate it lets everything through. Pure.
 */
import type { ReaderRate } from "./reader-rate";

export class ReaderBucket {
  private cost = 0;
  private gain = 0;
  private cap = 0;
  private level = 0;
  private limited = false;

  constructor(private at: number) {}

  /** Held to `r` from now (null: not held); room is kept in proportion, a new one starts full. */
  setRate(r: ReaderRate | null): void {
    if (r === null) {
      this.limited = false;
      return;
    }
    const cap = Math.max(r.perMs, r.n * 1000);
    this.level = this.limited ? Math.min(cap, Math.floor((this.level * r.perMs) / this.cost)) : cap;
    this.cost = r.perMs;
    this.gain = r.n;
    this.cap = cap;
    this.limited = true;
  }

  refill(now: number): void {
    const elapsed = now - this.at;
    if (elapsed > 0) {
      if (this.limited) this.level = Math.min(this.cap, this.level + elapsed * this.gain);
      this.at = now;
    }
  }

  /** Room for one message. */
  has(): boolean {
    return !this.limited || this.level >= this.cost;
  }

  /** One message goes: its room is taken (a priority message takes what there is, never more). */
  take(): void {
    if (this.limited) this.level = Math.max(0, this.level - this.cost);
  }

  /** When it next has room for one message (epoch ms). */
  readyAt(): number {
    if (this.has()) return this.at;
    return this.at + Math.ceil((this.cost - this.level) / this.gain);
  }
}
