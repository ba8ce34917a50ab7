/**
 * Whether a connection is still there (docs/api.md, "The Pusher door"): after
 * `PUSHER_ACTIVITY_TIMEOUT` of silence the host sends `pusher:ping`, and closes with 4201 when no
 * frame comes within 30 s. A client's own pings are answered by the runtime without waking the host
 * (`setWebSocketAutoResponse`); their time counts as activity (`getWebSocketAutoResponseTimestamp`).
 * One alarm covers every connection: it is due at the earliest connection's next check.
 */
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { PUSHER_PONG_TIMEOUT, PUSHER_PONG_WAIT_S } from "../wire/pusher/codes";
import { PING } from "../wire/pusher/frames";
import type { Connections } from "./connections";

export class Liveness {
  constructor(
    private readonly ctx: DurableObjectState,
    private readonly connections: Connections,
    private readonly alarms: AlarmScheduler,
    private readonly timeoutMs: () => number,
    private readonly close: (ws: WebSocket, code: number, reason: string) => void,
  ) {}

  /** When the connection last spoke (its frames, or its pings the runtime answered). */
  private lastHeard(ws: WebSocket): number {
    const seen = this.connections.attachment(ws)?.seen ?? 0;
    const auto = this.ctx.getWebSocketAutoResponseTimestamp(ws)?.getTime() ?? 0;
    return Math.max(seen, auto);
  }

  /** Pings the silent, closes those that did not answer, and asks the alarm for the next check. */
  tick(now: number): void {
    let next = Number.POSITIVE_INFINITY;
    const timeout = this.timeoutMs();
    const wait = PUSHER_PONG_WAIT_S * 1000;
    for (const ws of this.connections.open()) {
      const a = this.connections.attachment(ws);
      if (!a) continue;
      const heard = this.lastHeard(ws);
      if (a.pinged > 0 && heard < a.pinged) {
        if (now - a.pinged >= wait) {
          this.close(ws, PUSHER_PONG_TIMEOUT, "pong reply not received");
          continue;
        }
        next = Math.min(next, a.pinged + wait);
        continue;
      }
      if (now - heard >= timeout) {
        try {
          ws.send(PING);
        } catch {
          continue;
        }
        this.connections.update(ws, { pinged: now });
        next = Math.min(next, now + wait);
      } else {
        if (a.pinged > 0) this.connections.update(ws, { pinged: 0 });
        next = Math.min(next, heard + timeout);
      }
    }
    this.alarms.request(next);
  }

  /** A new connection: checked one timeout from now at the latest. */
  watch(now: number): void {
    this.alarms.request(now + this.timeoutMs());
  }
}
