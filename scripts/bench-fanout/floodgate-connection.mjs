// Floodgate's own WebSocket subscriber (docs/api.md, "Subscribe"): one kind of subscriber connection
// a bench:fanout thread opens (subscriber-thread.mjs). Another kind (another protocol) is a module
// with the same two functions: how to open one, and what a text frame holds.

export const floodgateConnection = {
  /**
   * Opens one subscriber on `url`, calling `on.open()` once it is subscribed (for Floodgate's own
   * WebSocket: once the handshake is done), `on.error()` on an error, `on.close()` when it closes and
   * `on.text(data)` for each text frame.
   */
  open(url, on) {
    const ws = new WebSocket(url);
    ws.onopen = () => on.open();
    ws.onerror = () => on.error();
    ws.onclose = () => on.close();
    ws.onmessage = (e) => on.text(e.data);
  },
  /**
   * A text frame's messages, in Floodgate's frame shapes (`{ type: "message", seq, data }`,
   * `{ type: "presence", action }`): a frame is one message, or (packed frames) an array of them.
   */
  read(text) {
    const parsed = JSON.parse(text);
    return Array.isArray(parsed) ? parsed : [parsed];
  },
};
