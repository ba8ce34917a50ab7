/**
 * A connection host's memory bound (src/connection-host/backlog.ts), on its own with plain objects
 * standing in for sockets: a socket's reading is taken when it is sent to, so one on a quiet lane may
 * be stale; a total past the cap is read again before anyone is closed, and the most behind by fresh
 * readings go first.
 */
import { describe, expect, it } from "vitest";
import {
  type BackloggedSocket,
  BEHIND_REASON,
  HOST_MEMORY_REASON,
  HostBacklog,
} from "../../src/connection-host/backlog";

const MiB = 1024 * 1024;

type Fake = BackloggedSocket & { name: string };

function hostOf() {
  const closed: { name: string; reason: string }[] = [];
  const backlog = new HostBacklog<Fake>({
    closeSlow: (ws, reason) => {
      closed.push({ name: ws.name, reason });
      (ws as { readyState: number }).readyState = 3; // CLOSED
    },
  });
  const sockets = (prefix: string, n: number, bytes: (i: number) => number): Fake[] =>
    Array.from({ length: n }, (_, i) => ({ name: `${prefix}${i}`, bufferedAmount: bytes(i), readyState: 1 }));
  return { backlog, closed, sockets };
}

describe("a connection host's memory bound", () => {
  it("a lane that drained since its last send closes nobody when another lane's sends pass the cap", () => {
    const host = hostOf();
    // One lane's batch leaves 20 MiB on its 20 sockets (each at the 1 MiB it may hold)...
    const a = host.sockets("a", 20, () => MiB);
    for (const ws of a) host.backlog.sent(ws);
    // ...which they read; that lane stays quiet, so nothing reads them again on a send.
    for (const ws of a) ws.bufferedAmount = 0;
    // Another lane's batch leaves 13 MiB: 33 MiB by the old readings, 13 MiB in truth.
    for (const ws of host.sockets("b", 13, () => MiB)) host.backlog.sent(ws);
    expect(host.closed).toEqual([]);
    expect(host.backlog.total).toBe(13 * MiB);
  });

  it("past the cap by fresh readings, closes the most behind first until the rest fit", () => {
    const host = hostOf();
    // 32 sockets, s0 the most behind (1 MiB), each next one a byte less: just under 32 MiB.
    const s = host.sockets("s", 33, (i) => MiB - i);
    for (const ws of s.slice(0, 32)) host.backlog.sent(ws);
    expect(host.closed).toEqual([]);
    // Since: s0 read half of its, s5 fell to the full 1 MiB; neither was sent to, so neither was read.
    (s[0] as Fake).bufferedAmount = MiB / 2;
    (s[5] as Fake).bufferedAmount = MiB;
    // One more pushes the total past 32 MiB: s5 is the most behind now, not s0 as last read.
    host.backlog.sent(s[32] as Fake);
    expect(host.closed).toEqual([{ name: "s5", reason: HOST_MEMORY_REASON }]);
    expect(host.backlog.total).toBeLessThanOrEqual(32 * MiB);
  });

  it("one socket more than 1 MiB behind is closed on its own, and its bytes no longer count", () => {
    const host = hostOf();
    const [ok, behind] = host.sockets("w", 2, (i) => (i === 0 ? 10 : MiB + 1));
    host.backlog.sent(ok as Fake);
    host.backlog.sent(behind as Fake);
    expect(host.closed).toEqual([{ name: "w1", reason: BEHIND_REASON }]);
    expect(host.backlog.total).toBe(10);
  });
});
