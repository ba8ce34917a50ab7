/**
 * The names of connection hosts and of their directories (docs/operations.md, "The Pusher door: how
 * it scales"): a host is `host:{group}:{k}`, k = 0, 1, … within the placement group of the
 * connections it holds (src/relay/placement.ts), and each group's directory is `hosts:{group}`.
 * A channel's relay registry tells a host from a relay by the prefix (src/channel/relay-registry.ts).
 */

export function hostName(group: string, k: number): string {
  return `host:${group}:${k}`;
}

export function directoryName(group: string): string {
  return `hosts:${group}`;
}
