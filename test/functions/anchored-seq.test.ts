/**
 * Where a last sent seq is kept (functions/anchored-seq.ts), with named sockets and every write
 * recorded: written only when it moved or its anchor can no longer hold it, handed to another socket
 * with the old one told to drop its entry, kept by the fallback (or nowhere) when no socket takes it,
 * and written again after a write that threw.
 * The relay's and the lane's own tests run it with real sockets (test/relay/subscriber-sockets.test.ts,
 * test/connection-host/lane-seq.test.ts).
 */
import { describe, expect, it } from "vitest";
import { AnchoredSeq, type SeqHolders } from "../../functions/anchored-seq";

/** Sockets by name: which are open, which have room, and every write, drop and fallback. */
class Holders implements SeqHolders<string> {
  readonly open = new Set<string>();
  readonly full = new Set<string>();
  readonly held = new Map<string, [number, number]>();
  readonly log: string[] = [];
  tries = 8;
  /** Whether the fallback keeps the seq (a lane's row) or nothing does (a relay). */
  keepsFallback = true;
  private last = 0;

  constructor(readonly sockets: string[]) {
    for (const s of sockets) this.open.add(s);
  }
  holds(s: string): boolean {
    return this.open.has(s);
  }
  candidates(): Iterable<string> {
    return this.sockets;
  }
  isOpen(s: string): boolean {
    return this.open.has(s);
  }
  write(s: string, seq: number, generation: number): boolean {
    if (this.full.has(s)) return false;
    this.held.set(s, [seq, generation]);
    this.log.push(`write ${s} ${seq}`);
    return true;
  }
  drop(s: string): void {
    this.held.delete(s);
    this.log.push(`drop ${s}`);
  }
  fallback(seq: number): boolean {
    this.log.push(`fallback ${seq}`);
    return this.keepsFallback;
  }
  nextGeneration(): number {
    return ++this.last;
  }
}

describe("a seq kept with its sockets", () => {
  it("is written once while it stands still, and again when it moves", () => {
    const h = new Holders(["a", "b"]);
    const seq = new AnchoredSeq(h);
    seq.keep(10);
    seq.keep(10);
    seq.keep(20);
    expect(h.log).toEqual(["write a 10", "write a 20"]);
    expect(h.held.get("a")).toEqual([20, 2]);
    expect(seq.generation).toBe(2);
  });

  it("moves to another socket when its anchor can no longer hold it, even unchanged, and the old entry goes", () => {
    const h = new Holders(["a", "b", "c"]);
    const seq = new AnchoredSeq(h);
    seq.keep(5);
    h.open.delete("a");
    h.full.add("b");
    seq.keep(5);
    expect(h.log).toEqual(["write a 5", "write c 5", "drop a"]);
    expect([...h.held]).toEqual([["c", [5, 2]]]);
    expect(seq.anchoredOn("c")).toBe(true);
  });

  it("goes to the fallback when none of the sockets it may ask takes it, and stays there while unchanged", () => {
    const h = new Holders(["a", "b", "c"]);
    h.tries = 2;
    h.full.add("a");
    h.full.add("b");
    const seq = new AnchoredSeq(h);
    seq.keep(3);
    seq.keep(3);
    // `c` has room but is past the two asked.
    expect(h.log).toEqual(["fallback 3"]);
    h.full.delete("a");
    seq.keep(4);
    expect(h.log).toEqual(["fallback 3", "write a 4"]);
  });

  it("with a fallback that keeps nothing, is written again by the next keep, unchanged or not", () => {
    const h = new Holders(["a"]);
    h.keepsFallback = false;
    h.open.delete("a");
    const seq = new AnchoredSeq(h);
    seq.keep(7);
    h.open.add("a");
    seq.keep(7);
    expect(h.log).toEqual(["fallback 7", "write a 7"]);
  });

  it("released by its anchor, leaves no entry and is written again next time; released by another, stays", () => {
    const h = new Holders(["a", "b"]);
    const seq = new AnchoredSeq(h);
    seq.keep(1);
    seq.release("b");
    seq.keep(1);
    seq.release("a");
    seq.keep(1);
    expect(h.log).toEqual(["write a 1", "drop a", "write a 1"]);
  });

  it("recovered on a socket that still holds it writes nothing; on one that cannot, moves it", () => {
    const h = new Holders(["a", "b"]);
    const seq = new AnchoredSeq(h);
    seq.recovered(9, 100, "b");
    seq.keep(9);
    expect(h.log).toEqual([]);
    expect(seq.generation).toBe(100);
    h.open.delete("b");
    seq.keep(9);
    expect(h.log).toEqual(["write a 9", "drop b"]);
  });

  it("a fallback that throws leaves the seq unheld: the next keep writes it again", () => {
    const h = new Holders([]);
    const seq = new AnchoredSeq(h);
    let failing = true;
    h.fallback = (at: number) => {
      h.log.push(`fallback ${at}`);
      if (failing) throw new Error("storage write failed");
      return true;
    };
    expect(() => seq.keep(4)).toThrow("storage write failed");
    failing = false;
    seq.keep(4);
    seq.keep(4);
    expect(h.log).toEqual(["fallback 4", "fallback 4"]);
  });
});
