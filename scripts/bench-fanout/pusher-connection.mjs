// A Pusher Channels connection (docs/api.md, "The Pusher door"): the second kind of subscriber
// connection a bench:fanout thread opens (subscriber-thread.mjs), beside Floodgate's own
// (floodgate-connection.mjs). It speaks the protocol as pusher-js does — connect to /app/{key}, wait
// for `pusher:connection_established`, `pusher:subscribe`, wait for `subscription_succeeded` — and
// reads each event back into Floodgate's frame shape, so the thread counts both kinds alike.

export const pusherConnection = {
  /**
   * Opens one connection on `url` (`/app/{key}?protocol=7&subscribe=<channel>`: the channel to
   * subscribe to rides in a parameter the server ignores) and calls `on.open()` once subscribed.
   */
  open(url, on) {
    const channel = new URL(url).searchParams.get("subscribe");
    const ws = new WebSocket(url);
    let subscribed = false;
    ws.onerror = () => on.error();
    ws.onclose = () => on.close();
    ws.onmessage = (e) => {
      if (subscribed) return on.text(e.data);
      const f = JSON.parse(e.data);
      if (f.event === "pusher:connection_established") {
        ws.send(JSON.stringify({ event: "pusher:subscribe", data: { channel } }));
      } else if (f.event === "pusher_internal:subscription_succeeded") {
        subscribed = true;
        on.open();
      } else if (f.event === "pusher:error" || f.event === "pusher:subscription_error") {
        on.error();
        ws.close();
      }
    };
  },
  /**
   * An event's message in Floodgate's shape: the bench publishes `{"event":"fanout","data":"{\"i\":…,\"t\":…}"}`;
   * a Pusher event carries no seq, so it is counted under `i + 1` (the publish's number, run-size.mjs
   * tallies by it) and `t` is its send time.
   */
  read(text) {
    const f = JSON.parse(text);
    if (f.event !== "fanout") return [];
    const data = JSON.parse(f.data);
    return [{ type: "message", seq: data.i + 1, data: { t: data.t } }];
  },
};
