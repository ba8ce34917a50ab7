/**
 * The close codes of WebSocket subscriptions (docs/api.md). The client package (packages/client)
 * imports this file and ships it in its dist/, so it imports nothing.
 */

/** The subscription's token expired: its last frame says where it stood, and it resumes with a fresh token. */
export const TOKEN_EXPIRED_CLOSE = 4001;
