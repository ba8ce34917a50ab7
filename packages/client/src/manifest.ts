// The public manifest (`GET /v1/manifest`, docs/api.md, Operator routes): the deployment's effective
// settings. Its shape is the server's own, from the repository's wire module (shipped in dist/src/wire/).

export type { Manifest, ManifestLimit, ManifestTarget } from "../../../src/wire/manifest.js";
