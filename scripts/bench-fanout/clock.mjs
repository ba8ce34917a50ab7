// The one clock of `npm run bench:fanout`: a publish carries its send time and a subscriber thread
// stamps each arrival, so both sides must read the same clock.

/** Wall-clock milliseconds with sub-ms resolution, comparable between threads of one process. */
export const now = () => performance.timeOrigin + performance.now();
