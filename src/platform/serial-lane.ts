/**
 * A lane of work: tasks run one at a time, in the order they were given. A relay's stream
 * (src/relay/stream.ts) and a connection host's lane (src/connection-host/lane.ts) run their
 * deliveries, repairs and joins in one, so nothing between a replay and live is skipped or repeated.
 */
export class SerialLane {
  private tail: Promise<unknown> = Promise.resolve();

  /** Runs `task` after every earlier one has settled; a failure fails only its own caller. */
  run<T>(task: () => Promise<T> | T): Promise<T> {
    const run = this.tail.then(task);
    this.tail = run.catch(() => {});
    return run;
  }
}
