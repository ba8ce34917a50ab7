// @ts-check
// A card's audience: the lever and a sharded channel's shards (docs/throttling.md, "Which lever").

import { $ } from "./dom.js";
import { countText, rateText } from "./format.js";

/** @import { Channel, Lever } from "./types.js" */

/**
 * The card's lever line (message rate and occupancy side by side, and what they point to) and, for
 * a sharded channel, one row per shard with its own numbers and lever.
 * @param {HTMLElement} el
 * @param {Channel} c
 */
export function renderAudience(el, c) {
  const lever = $(".lever", el);
  lever.replaceChildren(...leverParts(c.lever));
  lever.dataset.pointsTo = c.lever?.points_to ?? "none";
  const box = $(".shards", el);
  const shards = c.shards ?? [];
  box.hidden = shards.length === 0;
  // A sharded channel's card has no sample of its own: its shards' rows are its numbers.
  $(".chart", el).hidden = shards.length > 0;
  $(".sample", el).hidden = shards.length > 0;
  if (shards.length === 0) return;
  const head = document.createElement("tr");
  for (const h of ["Shard", "Message rate", "Subscribers", "Drop rate", "Lever"]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.append(th);
  }
  const rows = shards.map((s) => {
    const tr = document.createElement("tr");
    const cells = [
      s.shard ?? "",
      rateText(s.lever?.message_rate),
      countText(s.occupancy),
      s.drop_rate.toFixed(3),
      s.lever?.points_to ?? "none",
    ];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    if (s.lever) tr.title = s.lever.rule;
    tr.dataset.pointsTo = s.lever?.points_to ?? "none";
    return tr;
  });
  const table = document.createElement("table");
  table.append(head, ...rows);
  const caption = document.createElement("p");
  caption.textContent = `Sharded (${c.sharding?.pattern ?? "?"} by ${c.sharding?.by ?? "?"}): ${shards.length} shards, each a channel of its own; the numbers above add them up.`;
  box.replaceChildren(caption, table);
}

/**
 * "Message rate 12.0/s · Subscribers 1500 → shard", and the rule that said so.
 * @param {Lever | undefined} lever
 * @returns {(string | HTMLElement)[]}
 */
function leverParts(lever) {
  if (!lever) return [];
  const b = document.createElement("b");
  b.textContent = lever.points_to === "none" ? "no lever needed" : lever.points_to;
  const rule = document.createElement("span");
  rule.className = "rule";
  rule.textContent = ` (${lever.rule})`;
  return [`Message rate ${rateText(lever.message_rate)} · Subscribers ${countText(lever.occupancy)} → `, b, rule];
}
