// Minting an access token through the admin API, the one way every script gets a user token.

let mints = 0;

/**
 * Mints a token on `worker` ({ base, admin }, as the Worker starters return, or a server's URL and
 * admin bearer) and resolves to its `access_token`. `rl` is the token's publish budget override
 * (a shorthand like "100/s" or { rate, per, burst }); `group` and `scopes` go into the mint as given
 * (docs/api.md, "Shards"). A Worker started in bare workerd
 * (`spreadMintAddresses`) has no edge in front of it to set the client's address, so each mint
 * claims its own `cf-connecting-ip` there: the token-issue budget is per address, and a benchmark
 * minting hundreds of tokens must not run into it. Throws an Error with `status` (0: the server
 * could not be reached) when the mint fails.
 */
export async function mintToken(worker, { sub, channels, rl, ttl = "1h", group, scopes }) {
  mints++;
  const headers = { authorization: `Bearer ${worker.admin}`, "content-type": "application/json" };
  if (worker.spreadMintAddresses) headers["cf-connecting-ip"] = `198.18.${(mints >> 8) & 255}.${mints & 255}`;
  let res;
  try {
    res = await fetch(`${worker.base}/v1/tokens`, {
      method: "POST",
      headers,
      body: JSON.stringify({
        sub,
        channels,
        ttl,
        ...(rl ? { rl } : {}),
        ...(group ? { group } : {}),
        ...(scopes ? { scopes } : {}),
      }),
    });
  } catch (e) {
    throw Object.assign(new Error(`cannot reach ${worker.base}: ${e.cause?.message ?? e.message}`), { status: 0 });
  }
  const body = await res.text();
  if (res.status !== 201) {
    throw Object.assign(new Error(`minting a token failed: ${res.status} ${body}`), { status: res.status });
  }
  return JSON.parse(body).access_token;
}
