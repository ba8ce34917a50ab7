/**
 * Where a subscriber's relay is (docs/operations.md, "Relays and placement"). Relays are grouped by
 * the Cloudflare data center that received the subscribe (`request.cf.colo`), and a relay is first
 * reached from that subscriber's own request, so the runtime creates it near those subscribers
 * (a Durable Object is placed near its first caller and never moves): the channel sends each batch
 * across the WAN once per group, and each subscriber's frames leave from near it.
 *
 * Relay names are `relay:{channel}:{group}:{k}`, k = 0, 1, … within a group; locally there is no
 * colo and every relay is in the group `local`.
 */

/** The group of relays for a request: its colo's IATA code in lower case, or `local`. */
export function placementGroup(request: Request): string {
  const colo = (request as { cf?: { colo?: unknown } }).cf?.colo;
  if (typeof colo !== "string") return "local";
  const group = colo.toLowerCase().replace(/[^a-z0-9]/g, "");
  return group.length > 0 && group.length <= 8 ? group : "local";
}

export function relayName(channel: string, group: string, k: number): string {
  return `relay:${channel}:${group}:${k}`;
}
