// The frames a subscription receives (docs/api.md): messages, summaries of drops, presence, expiry.
// Their shapes are the server's own, from the repository's wire module (shipped in dist/src/wire/).

export type {
  ExpiredFrame,
  MessageFrame as Message,
  PresenceFrame,
  SubscriberSummaryFrame as SkippedSummary,
  SummaryFrame as Summary,
} from "../../../src/wire/frames.js";
